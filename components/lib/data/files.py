"""The files under a data root and their fingerprint, without pandas (the watcher imports this alone)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import fsspec

from ctpipe.components.lib.errors import UserError

DATA_SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


@dataclass(frozen=True)
class DataFile:
    """One data file under the root: its path relative to the root, size and content hash."""

    path: str
    size: int
    sha256: str = ""


def _fs_and_root(data_uri: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, root = fsspec.core.url_to_fs(data_uri)
    return fs, root.rstrip("/")


@dataclass(frozen=True)
class ListedFile:
    """A data file as the filesystem lists it, before any hashing."""

    path: str  # relative to the data root
    full_path: str
    size: int
    info: dict


def partition_of(rel_path: str) -> str:
    """A file's partition: its directory under the data root (the file itself at the top level)."""
    parts = rel_path.split("/")[:-1]
    return "/".join(parts) if parts else rel_path


_File = TypeVar("_File", "ListedFile", DataFile)


def grouped_by_partition(files: list[_File]) -> list[_File]:
    """``files`` with each partition's files next to each other: partitions in the order of their first file,
    files in their own order within (a stable sort, so a listing already grouped keeps its order).

    Why: in path order a folder's files are not contiguous when it also has subfolders (``d/a``, ``d/sub/b``,
    ``d/z``: ``d/sub`` is a partition of its own), and the streaming scan (``scan.py``) and pass 2 read each
    partition's rows as one run. The fingerprint does not depend on this order (``fingerprint_files`` sorts)."""
    first: dict[str, int] = {}
    for f in files:
        first.setdefault(partition_of(f.path), len(first))
    return sorted(files, key=lambda f: first[partition_of(f.path)])


def scan_data_files(data_uri: str) -> tuple[fsspec.AbstractFileSystem, list[ListedFile]]:
    """The data files under ``data_uri`` in a stable order, grouped by partition (one listing); a UserError
    when there are none."""
    fs, root = _fs_and_root(data_uri)
    if not fs.exists(root):
        raise UserError(
            f"data root '{data_uri}' does not exist. Pass an existing directory (or fsspec URL) of Parquet or "
            "CSV files to --data ('ctpipe demo-data --out DIR' writes an example; 'ctpipe run' without --data "
            "uses generated demo data)."
        )
    if fs.isfile(root):
        entries = {root: fs.info(root)}
        base = root.rsplit("/", 1)[0]
    else:
        entries = fs.find(root, detail=True)
        base = root
    files = []
    for path, info in sorted(entries.items()):
        rel = path[len(base) :].lstrip("/")
        name = rel.rsplit("/", 1)[-1]
        suffix = "." + name.rsplit(".", 1)[-1].lower() if "." in name else ""
        # A file or folder named with '.' or '_' is not data (as for Hadoop, Spark and pyarrow): writers keep
        # output in progress there (Spark's _temporary/, .staging/) and move it into place when it is whole.
        if suffix not in DATA_SUFFIXES or any(part.startswith((".", "_")) for part in rel.split("/")):
            continue
        files.append(ListedFile(rel, path, int(info.get("size") or 0), info))
    if not files:
        raise UserError(
            f"data root '{data_uri}' holds no Parquet (.parquet) or CSV (.csv) files. Write partitions such as "
            "DATA/date=2026-01-01/part-0.parquet, or run 'ctpipe demo-data --out DATA' to create an example."
        )
    return fs, grouped_by_partition(files)


def list_data_files(data_uri: str, *, with_hashes: bool = True) -> list[DataFile]:
    """List the data files under ``data_uri`` in a stable order grouped by partition, with their content hashes."""
    fs, listed = scan_data_files(data_uri)
    return [DataFile(f.path, f.size, sha256_file(fs, f.full_path) if with_hashes else "") for f in listed]


def sha256_file(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """SHA-256 of a file's bytes on ``fs``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sha256_local(path: str | Path) -> str:
    """SHA-256 of a local file's bytes (a model export, a checkpoint)."""
    return sha256_file(fsspec.filesystem("file"), str(path))


def fingerprint_files(files: list[DataFile]) -> str:
    """One stable hash over the names, sizes and content hashes of the files."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\0{f.size}\0{f.sha256}\n".encode())
    return h.hexdigest()


def data_columns(data_uri: str) -> list[str]:
    """The column names of the first data file under ``data_uri`` (its header only: no rows are read)."""
    import pandas as pd
    import pyarrow.parquet as pq

    fs, listed = scan_data_files(data_uri)
    if not listed:
        return []
    first = listed[0]
    with fs.open(first.full_path, "rb") as handle:
        if first.full_path.lower().endswith(".csv"):
            return [str(c) for c in pd.read_csv(handle, nrows=0).columns]
        return list(pq.read_schema(handle).names)
