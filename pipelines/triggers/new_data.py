"""New-data detection: the data root's fingerprint, cheaply, and the newest partitions.

The fingerprint is exactly the one validation computes, prepare_run keys the cache on and registration
stores on the model (``components/lib/data/content_fingerprint.py``); content hashes are cached in the ctpipe
home keyed by (path, size, modification time, change token), so a check with nothing new lists the root and
reads no data. benchmarks/change_detection.py measures this check against reading every Parquet footer and
against hashing every file, at 10,000 partitions.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from ctpipe.components.lib.data.content_fingerprint import cache_file_in, hash_files, home_cache_dir
from ctpipe.components.lib.data.files import DataFile, fingerprint_files, partition_of


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


def cache_path_for(home: str | Path, data_uri: str) -> Path:
    """Where the hash cache of one data root lives in the ctpipe home (``ctpipe run`` uses the same folder)."""
    return cache_file_in(home_cache_dir(home), data_uri)


def data_state(data_uri: str, cache_path: str | Path | None = None) -> DataState:
    """List ``data_uri`` and fingerprint it, hashing only files whose size, mtime or change token changed
    since the cache."""
    files, hashed = hash_files(data_uri, cache_path)
    return DataState(data_uri=data_uri, files=files, fingerprint=fingerprint_files(files), hashed=hashed)
