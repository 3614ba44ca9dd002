"""New-data detection: the data root's fingerprint, cheaply, and the newest partitions.

The fingerprint is exactly the one validation computes and registration stores on the model
(``fingerprint_files(list_data_files(uri))``), but content hashes are cached in the ctpipe home keyed by
(path, size, modification time, change token), so a check with nothing new lists the root and reads no data.

Size and modification time alone miss a rewrite that keeps both (``touch -d``, ``cp -p``, ``rsync -t`` of
other content): the change token is what a writer cannot set back. For local files that is the inode and
the status-change time (every write or ``utime`` moves it); object stores give a version of the object
itself (S3/HTTP ``ETag``, GCS ``generation``, Azure ``etag``). benchmarks/change_detection.py measures
this check against reading every Parquet footer and against hashing every file, at 10,000 partitions.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.data.files import (
    DataFile,
    fingerprint_files,
    partition_of,
    scan_data_files,
    sha256_file,
)


@dataclass(frozen=True)
class DataState:
    """The files under a data root with their content hashes, and their fingerprint."""

    data_uri: str
    files: list[DataFile]
    fingerprint: str
    hashed: int  # files whose content was (re)hashed in this call

    def partitions(self) -> list[str]:
        """Partition folders (``date=...``) in sorted order, oldest first."""
        return sorted({partition_of(f.path) for f in self.files})

    def window(self, newest: int, days: int | None = None) -> list[DataFile]:
        """The files of the ``newest`` partitions, or with ``days`` of the date partitions in the last ``days`` days."""
        partitions = self.partitions()
        dated = {p: partition_date(p) for p in partitions}
        if days is not None and all(dated.values()):
            last = max(dated.values())
            keep = {p for p, day in dated.items() if (last - day).days < days}
        else:
            # Sorted order is time order for date=YYYY-MM-DD (and most other) partition names.
            keep = set(partitions[-newest:])
        return [f for f in self.files if partition_of(f.path) in keep]


def partition_date(partition: str) -> dt.date | None:
    """The date of a ``.../date=YYYY-MM-DD`` partition (the last ``date=`` level), else None."""
    for part in reversed(partition.split("/")):
        if part.startswith(("date=", "dt=", "day=")):
            try:
                return dt.date.fromisoformat(part.split("=", 1)[1][:10])
            except ValueError:
                return None
    return None


def _modified(info: dict[str, Any]) -> str | None:
    # Local files report mtime, S3 LastModified, GCS updated; without one the file is always re-hashed.
    for key in ("mtime", "LastModified", "updated", "last_modified"):
        if info.get(key) is not None:
            return str(info[key])
    return None


# Object-store listings carry a version of the object's content; the first one present is the change token.
_STORE_VERSION_KEYS = ("ETag", "etag", "generation", "md5Hash", "VersionId", "version_id")


def change_token(fs: Any, full_path: str, info: dict[str, Any]) -> str | None:
    """What changes whenever the file's content is rewritten, whatever its size and mtime; None when the
    filesystem offers nothing (the file is then re-hashed at every check)."""
    if "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)):
        st = os.stat(full_path)
        return f"ino={st.st_ino},ctime_ns={st.st_ctime_ns}"
    for key in _STORE_VERSION_KEYS:
        if info.get(key) is not None:
            return f"{key}={info[key]}"
    return None


def cache_path_for(home: str | Path, data_uri: str) -> Path:
    """Where the hash cache of one data root lives in the ctpipe home."""
    key = hashlib.sha256(data_uri.rstrip("/").encode()).hexdigest()[:16]
    return Path(home) / "watch" / "hash-cache" / f"{key}.json"


def _load_cache(path: Path) -> dict[str, dict[str, Any]]:
    try:
        return json.loads(path.read_text()).get("files", {})
    except (OSError, ValueError, AttributeError):
        return {}  # a missing or damaged cache only costs re-hashing


def _save_cache(path: Path, data_uri: str, entries: dict[str, dict[str, Any]]) -> None:
    # Concurrent watchers each write a whole, valid cache.
    atomic_write_text(path, json.dumps({"data_uri": data_uri, "files": entries}))


def data_state(data_uri: str, cache_path: str | Path | None = None) -> DataState:
    """List ``data_uri`` and fingerprint it, hashing only files whose size, mtime or change token changed
    since the cache."""
    fs, listed = scan_data_files(data_uri)  # the same file selection validation uses
    cache = _load_cache(Path(cache_path)) if cache_path else {}
    entries: dict[str, dict[str, Any]] = {}
    files, hashed = [], 0
    for f in listed:
        key = {"size": f.size, "mtime": _modified(f.info), "token": change_token(fs, f.full_path, f.info)}
        cached = cache.get(f.path)
        if cached and None not in key.values() and all(cached.get(k) == v for k, v in key.items()):
            digest = cached["sha256"]
        else:
            digest, hashed = sha256_file(fs, f.full_path), hashed + 1
        entries[f.path] = key | {"sha256": digest}
        files.append(DataFile(f.path, f.size, digest))
    if cache_path and (hashed or len(entries) != len(cache)):
        _save_cache(Path(cache_path), data_uri, entries)
    return DataState(data_uri=data_uri, files=files, fingerprint=fingerprint_files(files), hashed=hashed)
