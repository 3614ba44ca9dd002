"""The data files' facts computed in Spark tasks: each file's SHA-256 (its bytes read once, in parallel) and rows.

The driver only lists the files (names and sizes: one listing); hashing every byte, which is the fingerprint,
and counting rows (Parquet footers; a CSV file is read) are per-file work that a folder of 50,000 files or a
billion rows spreads over the executors.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctpipe.components.lib.data.batches import count_rows, iter_batches
from ctpipe.components.lib.data.files import DataFile, scan_data_files, sha256_file
from ctpipe.components.lib.errors import UserError


@dataclass(frozen=True)
class FileFacts:
    """The files in listing order with their hashes, and each file's rows."""

    files: list[DataFile]
    rows: list[int]


def _facts(data_uri: str, fmt: str, path: str, full_path: str, size: int) -> tuple[str, int, str | None]:
    """(sha256, rows, error message) of one file, in a Spark task."""
    import fsspec

    fs, _ = fsspec.core.url_to_fs(data_uri)
    digest = sha256_file(fs, full_path)
    entry = DataFile(path, size, digest)
    try:
        rows = count_rows(data_uri, [entry], fmt)
        if rows is None:  # CSV: no footer, so the file is read
            rows = sum(len(b) for b in iter_batches(data_uri, [entry], fmt))
    except UserError as err:  # a damaged file is named as the local engine names it
        return digest, 0, str(err)
    return digest, int(rows), None


def file_facts(spark, data_uri: str, fmt: str, *, partitions: int) -> FileFacts:
    """Hashes and row counts of every data file under ``data_uri``, computed in Spark tasks."""
    from ctpipe.components.lib.errors import DataValidationError

    _, listed = scan_data_files(data_uri)
    items = [(f.path, f.full_path, f.size) for f in listed]
    # A task per ~100 files or ~32 MiB, at most ``partitions``: thousands of tiny files are a few tasks, not one each.
    slices = max(1, min(partitions, len(items) // 100 + 1, sum(f.size for f in listed) // (32 << 20) + 1))
    found = spark.sparkContext.parallelize(items, slices).map(
        lambda item: _facts(data_uri, fmt, *item)).collect()
    for _, _, error in found:
        if error:
            raise DataValidationError(error)
    return FileFacts([DataFile(path, size, digest) for (path, _, size), (digest, _, _) in zip(items, found, strict=True)],
                     [rows for _, rows, _ in found])
