"""Data too large for one frame: one streaming pass for exact figures and a stratified sample, then the snapshot.

Above ``validation.in_memory_rows`` rows, validation never holds the data. Pass 1 (``scan``) reads the
partitions as record batches and keeps:

- exact figures: rows per partition, label nulls, per column its nulls, numeric min/max and text value
  counts (``ColumnTotals``), each row's split (``splits.py``, per row, so streaming
  changes nothing), and 64-bit content hashes per split for the cross-split duplicate check (9 bytes a
  row: the one part of the working set that grows with the data, 144 MB at 16M rows); with ``data.key``, a
  hash of each row's key and a code of its label, to find a key repeated with different labels anywhere in
  the data (12 bytes a row, held during the pass only);
- a seeded sample stratified by partition and label: in each partition, per label class, the rows with
  the smallest hash priority (``stream_stats.row_priority``), proportional to the class's share with a
  floor for rare classes, ``sample_rows / partitions`` rows per partition (at least ``MIN_PER_PARTITION``).
  Rows with text in a mostly-numeric column are always taken (so the type check sees every one).

The checks that judge rows (the GX suite's row expectations, types, schema changes, leakage, constant
and id-like columns, skew) run on the sample, and their findings say so; the partition table, the row
count, label nulls, the split sizes and cross-split duplicates are exact. Pass 2 (``write_snapshot_stream``)
reads the batches again and writes the snapshot's split files row group by row group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches, partition_of
from ctpipe.components.lib.data.concat import conform
from ctpipe.components.lib.data.files import DataFile, grouped_by_partition
from ctpipe.components.lib.data.scan_parts import (  # noqa: F401  (re-exported: the pass's names live here)
    MIN_PER_PARTITION,
    Scan,
    ScanPart,
    content_hashes,
)
from ctpipe.components.lib.data.snapshot import Schema, Snapshot, SnapshotWriter
from ctpipe.components.lib.data.splits import PARTITION_COLUMN, SPLITS, SplitSettings
from ctpipe.components.lib.data.window import TrainWindow, partition_date

# Told of each batch a pass finished: its rows and its partition.
BatchDone = Callable[[int, str], None]


def scan(data_uri: str, files: list[DataFile], fmt: str, *, label: str | None, key: str | None, features: list[str],
         settings: SplitSettings, sample_rows: int, seed: int = 0, stratify_by_label: bool = True,
         on_batch: BatchDone | None = None) -> Scan:
    """Pass 1: exact figures and a stratified sample (see the module docstring). ``stratify_by_label`` False (a
    real-valued label, ``Task.label_kind`` "continuous"): by partition only, since every distinct value of such
    a label would be a class with its floor of rows, and the sample would grow to every row. ``on_batch(rows,
    partition)`` is told of every batch done (a progress line)."""
    if grouped_by_partition(files) != list(files):  # each partition's sample, and pass 2's windows, are one run
        raise ValueError("scan needs the files grouped by partition, as list_data_files lists them")
    partitions = sorted({partition_of(f.path) for f in files})
    part = ScanPart(label=label, key=key, features=features, settings=settings, seed=seed,
                    budget=sample_budget(sample_rows, len(partitions)), stratify_by_label=stratify_by_label)
    for batch in iter_batches(data_uri, files, fmt):
        part.add(batch)
        if on_batch is not None:
            on_batch(len(batch), str(batch[PARTITION_COLUMN].iloc[0]) if len(batch) else "")
    return part.to_scan(partitions)


def sample_budget(sample_rows: int, partitions: int) -> int:
    """Sample rows per partition: an equal share of ``sample_rows``, at least ``MIN_PER_PARTITION``."""
    return max(MIN_PER_PARTITION, sample_rows // max(partitions, 1))


def duplicate_count(scan_result: Scan) -> tuple[int, int]:
    """(val/test rows whose content repeats a row of an earlier split, val/test rows): exact over every row."""
    if scan_result.duplicates is not None:
        return scan_result.duplicates
    train, val, test = (scan_result.splits == i for i in range(3))
    content = pd.Series(scan_result.content)
    dup = (~train) & content.isin(scan_result.content[train]).to_numpy()
    dup |= test & content.isin(scan_result.content[val]).to_numpy()
    return int(dup.sum()), int((~train).sum())


def train_rows_per_partition(scan_result: Scan) -> dict[str, int]:
    """Train rows per partition (from the per-row splits, which are in partition order)."""
    if scan_result.train_per_partition is not None:
        return dict(scan_result.train_per_partition)
    partitions = list(scan_result.rows)
    per_part = np.repeat(np.arange(len(partitions)), [scan_result.rows[p] for p in partitions])
    train = scan_result.splits == 0
    return {p: int(train[per_part == i].sum()) for i, p in enumerate(partitions)}


def window_quota(scan_result: Scan, partitions: list[str], window: TrainWindow) -> dict[str, int]:
    """Train rows to keep per partition (its last ones), newest partition first, as ``window.window_mask``."""
    counts = train_rows_per_partition(scan_result)
    counts = {p: counts.get(p, 0) for p in partitions}
    if window.window_days is not None:
        newest = max(partition_date(p) for p in partitions)
        counts = {p: (n if (newest - partition_date(p)).days < window.window_days else 0) for p, n in counts.items()}
    left = window.max_train_rows if window.max_train_rows is not None else sum(counts.values())
    quota = {}
    for p in sorted(partitions, key=lambda p: (partition_date(p) or pd.Timestamp.min.date(), p), reverse=True):
        quota[p] = min(counts[p], left)
        left -= quota[p]
    return quota


def write_snapshot_stream(out_dir: str, data_uri: str, files: list[DataFile], fmt: str, scan_result: Scan,
                          schema: Schema, *, fingerprint: str, window: TrainWindow, task: Any,
                          on_batch: BatchDone | None = None, stats: Any = None) -> Snapshot:
    """Pass 2: the split files written batch by batch, in the sample's column order and dtypes (``on_batch`` as
    ``scan``'s)."""
    partitions = list(scan_result.rows)
    quota = window_quota(scan_result, partitions, window) if not window.is_all else None
    train_seen = dict.fromkeys(partitions, 0)
    train_total = {p: 0 for p in partitions}
    per_part = np.repeat(np.arange(len(partitions)), [scan_result.rows[p] for p in partitions])
    for i, p in enumerate(partitions):
        train_total[p] = int((scan_result.splits[per_part == i] == 0).sum())
    dtypes = scan_result.sample.dtypes
    writer = SnapshotWriter(out_dir, schema, task=task, stats=stats)
    start, excluded = 0, 0
    for batch in iter_batches(data_uri, files, fmt):
        batch = batch.reindex(columns=list(scan_result.sample.columns))
        for col, dtype in dtypes.items():
            if batch[col].dtype != dtype:
                batch[col] = conform(batch[col], dtype).astype(dtype)
        split = np.array(SPLITS, dtype=object)[scan_result.splits[start : start + len(batch)]]
        start += len(batch)
        if quota is not None:
            part = batch[PARTITION_COLUMN].iloc[0]
            train = split == "train"
            index = train_seen[part] + np.cumsum(train) - 1  # position among the partition's train rows
            train_seen[part] += int(train.sum())
            drop = train & (index < train_total[part] - quota[part])
            excluded += int(drop.sum())
            split = np.where(drop, "outside_window", split)
        writer.add(batch, pd.Series(split, index=batch.index))
        if on_batch is not None:
            on_batch(len(batch), str(batch[PARTITION_COLUMN].iloc[0]) if len(batch) else "")
    if quota is not None:
        writer.window = {**window.to_dict(), "excluded_train_rows": excluded,
                         "partitions": sorted(p for p, n in quota.items() if n > 0)}
    return writer.close(data_uri=data_uri, files=files, fingerprint=fingerprint)
