"""The training window: which train-split rows a model trains on (``data.window_days`` / ``data.max_train_rows``).

Validation judges every partition, but a team may train on the recent past only: the train rows of
partitions dated within ``window_days`` days of the newest partition's date (a partition's date is the
``YYYY-MM-DD`` in its path, as in ``date=2026-01-07/``), then at most ``max_train_rows`` of them, the
newest partitions first (and the last rows of the oldest partition kept). Val and test rows are never
dropped, so the gates still see the newest data. ``None`` (the default) keeps everything.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ctpipe.components.lib.errors import DataValidationError

_DATE = re.compile(r"(\d{4}-\d{2}-\d{2})")


@dataclass(frozen=True)
class TrainWindow:
    """The window settings; both ``None`` means every train row."""

    window_days: int | None = None
    max_train_rows: int | None = None

    @classmethod
    def from_config(cls, data: Any) -> TrainWindow:
        return cls(window_days=getattr(data, "window_days", None), max_train_rows=getattr(data, "max_train_rows", None))

    @property
    def is_all(self) -> bool:
        return self.window_days is None and self.max_train_rows is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def partition_date(partition: str) -> dt.date | None:
    """The date in a partition's path (the last ``YYYY-MM-DD`` in it), or None."""
    found = _DATE.findall(partition)
    try:
        return dt.date.fromisoformat(found[-1]) if found else None
    except ValueError:
        return None


def window_mask(partitions: np.ndarray, is_train: np.ndarray, window: TrainWindow) -> np.ndarray:
    """True for the train rows inside ``window`` (rows in partition order; False for every non-train row)."""
    keep = np.asarray(is_train, dtype=bool).copy()
    if window.is_all or not keep.any():
        return keep
    partitions = np.asarray(partitions, dtype=object)
    names = sorted(set(partitions.tolist()))
    if window.window_days is not None:
        dates = {p: partition_date(p) for p in names}
        undated = [p for p, d in dates.items() if d is None]
        if undated:
            raise DataValidationError(
                f"data.window_days={window.window_days} needs a date in every partition path, but "
                f"{len(undated)} partition(s) have none: {', '.join(undated[:5])}. Partition the data as "
                "date=YYYY-MM-DD/ or set data.window_days=null (data.max_train_rows needs no dates)."
            )
        newest = max(dates.values())
        first = newest - dt.timedelta(days=window.window_days - 1)
        inside = {p for p, d in dates.items() if d >= first}
        keep &= np.isin(partitions, list(inside))
    if window.max_train_rows is not None and keep.sum() > window.max_train_rows:
        # Newest partitions first; within a partition (in file order) its last rows.
        rank = {p: i for i, p in enumerate(sorted(names, key=lambda p: (partition_date(p) or dt.date.min, p)))}
        order = np.array([rank[p] for p in partitions])
        candidates = np.flatnonzero(keep)
        newest_first = candidates[np.lexsort((-candidates, -order[candidates]))]
        keep[:] = False
        keep[newest_first[: window.max_train_rows]] = True
    return keep
