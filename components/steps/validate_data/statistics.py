"""The train split's statistics from per-partition sketches (``components/lib/sketches/``), for the snapshot.

Which train rows of each partition the training window keeps decides each partition's sketch key, so a
window that cuts a partition gives it a sketch of its own. The stored sketches of unchanged partitions are
reused: only new (or changed) partitions are read for statistics.
"""

from __future__ import annotations

import sys
from typing import Any

from ctpipe.components.lib.data import scan as stream
from ctpipe.components.lib.data.splits import PARTITION_COLUMN, SPLIT_COLUMN, SplitSettings
from ctpipe.components.lib.data.window import TrainWindow, window_mask
from ctpipe.components.lib.sketches.partition_sketches import Compute, Keep, SketchPass, train_sketch


def window_keep(window: TrainWindow | None, partitions: list[str], train_rows: dict[str, int],
                kept_rows: dict[str, int]) -> dict[str, Keep]:
    """Per partition: None (every train row), 0 (none) or the number of its last train rows the window keeps."""
    if window is None or window.is_all:
        return {}
    return {p: None if kept_rows.get(p, 0) == train_rows.get(p, 0) else kept_rows.get(p, 0) for p in partitions}


def keep_in_memory(data, window: TrainWindow | None) -> dict[str, Keep]:
    """``window_keep`` of a frame with its ``__partition`` and ``__split`` columns (the in-memory path)."""
    if window is None or window.is_all:
        return {}
    parts = data[PARTITION_COLUMN].to_numpy()
    is_train = (data[SPLIT_COLUMN] == "train").to_numpy()
    kept = window_mask(parts, is_train, window)
    names = sorted(set(parts.tolist()))
    return window_keep(window, names, {p: int(is_train[parts == p].sum()) for p in names},
                       {p: int(kept[parts == p].sum()) for p in names})


def keep_streamed(scanned: stream.Scan, window: TrainWindow | None) -> dict[str, Keep]:
    """``window_keep`` from the streaming pass's exact figures."""
    if window is None or window.is_all:
        return {}
    partitions = list(scanned.rows)
    quota = stream.window_quota(scanned, partitions, window)
    return window_keep(window, partitions, stream.train_rows_per_partition(scanned), quota)


def train_statistics(data_uri: str, files: list, fmt: str, schema: Any, config: Any, keep: dict[str, Keep], *,
                     compute: Compute | None = None) -> SketchPass:
    """The train split's merged sketch (stored partitions reused; ``compute``: the engine's, default in process)."""
    result = train_sketch(data_uri, files, fmt, schema, SplitSettings.from_config(config.data),
                          store_uri=config.validation.sketch_store, keep=keep, compute=compute)
    print(f"validate_data: statistics from {len(result.reused)} stored and {len(result.computed)} new partition "
          f"sketch(es), {result.bytes_read} bytes read for them", file=sys.stderr)
    return result

