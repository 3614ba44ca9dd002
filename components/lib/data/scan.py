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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches, partition_of
from ctpipe.components.lib.data.concat import concat_partitions, conform
from ctpipe.components.lib.data.encoding import label_text
from ctpipe.components.lib.data.files import DataFile, grouped_by_partition
from ctpipe.components.lib.data.snapshot import Schema, Snapshot, SnapshotWriter
from ctpipe.components.lib.data.splits import (
    INTERNAL_COLUMNS,
    PARTITION_COLUMN,
    SPLITS,
    SplitSettings,
    split_keys,
)
from ctpipe.components.lib.data.stream_stats import ColumnTotals, row_priority
from ctpipe.components.lib.data.window import TrainWindow, partition_date
from ctpipe.components.lib.errors import DataValidationError

MIN_PER_PARTITION = 2_000
CLASS_FLOOR = 50
_NULL_LABEL = "\0null"


@dataclass
class Scan:
    """What pass 1 found: exact figures over every row, and the sample the row checks judge."""

    sample: pd.DataFrame
    rows: dict[str, int] = field(default_factory=dict)
    label_nulls: int = 0
    splits: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int8))
    content: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    # Exact per column over every row (nulls, numeric min/max, text value counts): stream_stats.ColumnTotals.
    columns: dict[str, ColumnTotals] = field(default_factory=dict)
    train_columns: dict[str, ColumnTotals] = field(default_factory=dict)  # the same over the train rows
    # Per sample row, the rows of its partition and label class it stands for (partitions get equal budgets and
    # rare classes a floor, so the sample is not proportional): a share of all rows is estimated with them.
    weights: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    # Non-null values per partition and column (a column a partition's files lack: absent, i.e. 0).
    present: dict[str, dict[str, int]] = field(default_factory=dict)
    # Set by an engine that keeps no per-row arrays (Spark, ``components/lib/spark/scan.py``): what the arrays give.
    split_totals: dict[str, int] | None = None
    train_per_partition: dict[str, int] | None = None
    duplicates: tuple[int, int] | None = None

    @property
    def total(self) -> int:
        return int(sum(self.rows.values()))

    def split_rows(self) -> dict[str, int]:
        if self.split_totals is not None:
            return dict(self.split_totals)
        counts = np.bincount(self.splits, minlength=len(SPLITS))
        return {s: int(counts[i]) for i, s in enumerate(SPLITS)}

    def judged_on(self) -> str:
        return (f"a stratified sample of {len(self.sample)} of {self.total} rows (per partition and label, seeded; "
                "exact: partition rows, row count, label nulls, split sizes, cross-split duplicates, keys with two labels)")

# Told of each batch a pass finished: its rows and its partition.
BatchDone = Callable[[int, str], None]


def content_hashes(batch: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """A 64-bit hash of each row's values in ``columns``: the sum over its non-null cells of a hash of
    (column, value), numbers as float64 (5 and 5.0 agree), so a column absent from a batch counts as null."""
    total = np.zeros(len(batch), dtype=np.uint64)
    for col in columns:
        if col not in batch.columns:
            continue
        values = batch[col]
        if pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values):
            values = values.astype("float64")
        hashed = pd.util.hash_pandas_object(values, index=False).to_numpy(dtype=np.uint64)
        salt = pd.util.hash_array(np.array([str(col)], dtype=object))[0]
        cell = (hashed ^ salt) * np.uint64(0x9E3779B97F4A7C15)  # wraps mod 2**64
        cell[values.isna().to_numpy()] = 0
        total += cell
    return total


def _stray_text(batch: pd.DataFrame) -> np.ndarray:
    """Rows holding text in a column whose values are mostly numbers (what ``check_numeric_types`` reports)."""
    stray = np.zeros(len(batch), dtype=bool)
    for col in batch.columns:
        series = batch[col]
        if col == PARTITION_COLUMN or pd.api.types.is_numeric_dtype(series) or pd.api.types.is_bool_dtype(series):
            continue
        head = series.dropna().iloc[:1000]
        if head.empty or pd.to_numeric(head, errors="coerce").notna().mean() < 0.5:
            continue
        stray |= (series.notna() & pd.to_numeric(series, errors="coerce").isna()).to_numpy()
    return stray


def _allocate(counts: dict[str, int], budget: int) -> dict[str, int]:
    """Rows per label class: proportional to its count, at least CLASS_FLOOR (or all it has)."""
    total = sum(counts.values())
    if total <= budget:
        return dict(counts)
    return {c: min(n, max(CLASS_FLOOR, round(budget * n / total))) for c, n in counts.items()}


class _PartitionSample:
    """Bottom-priority rows per label class of one partition, trimmed to the budget batch by batch."""

    def __init__(self, budget: int) -> None:
        self.budget, self.counts = budget, {}
        self.keep: dict[str, pd.DataFrame] = {}

    def add(self, batch: pd.DataFrame, labels: pd.Series, priority: np.ndarray, positions: np.ndarray) -> None:
        frame = batch.assign(_priority=priority, _position=positions)
        for cls, rows in frame.groupby(labels.fillna(_NULL_LABEL).to_numpy(), sort=False):
            self.counts[cls] = self.counts.get(cls, 0) + len(rows)
            both = concat_partitions([self.keep[cls], rows]) if cls in self.keep else rows
            self.keep[cls] = both.nsmallest(self.budget, ["_priority", "_position"])

    def rows(self) -> pd.DataFrame:
        """The sample, with ``_weight``: the rows of its partition and class that each sampled row stands for."""
        take = _allocate(self.counts, self.budget)
        parts = [self.keep[c].nsmallest(n, ["_priority", "_position"]).assign(_weight=self.counts[c] / n)
                 for c, n in take.items() if n]
        return concat_partitions(parts).sort_values("_position") if parts else pd.DataFrame()


class _KeyLabels:
    """Per row a 64-bit hash of its canonical key and a code of its label, to find a key repeated with different
    labels in different batches (``splits.key_texts`` judges one batch at a time): 12 bytes a row."""

    def __init__(self) -> None:
        self.hashes: list[np.ndarray] = []
        self.codes: list[np.ndarray] = []
        self.label_codes: dict[str, int] = {}
        self.batches: list[tuple[int, str, int]] = []  # (first row of the batch, its partition, its first row there)

    def add(self, keys: pd.Series, labels: pd.Series, position: int, part: str, in_part: int) -> None:
        for text in labels.dropna().unique():
            self.label_codes.setdefault(text, len(self.label_codes))
        self.hashes.append(pd.util.hash_array(keys.to_numpy(dtype=object)))
        self.codes.append(labels.map(self.label_codes).fillna(-1).to_numpy(dtype=np.int32))
        self.batches.append((position, part, in_part))

    def check(self, key: str, label: str) -> None:
        """Raise DataValidationError naming the rows of (up to three) keys that carry more than one label."""
        if not self.hashes:
            return
        hashes, codes = np.concatenate(self.hashes), np.concatenate(self.codes)
        ordered = np.sort(hashes)
        repeated = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
        del ordered
        if not len(repeated):
            return
        rows = np.flatnonzero(np.isin(hashes, repeated))
        labels_per_key = pd.Series(codes[rows]).groupby(hashes[rows]).nunique()
        conflicting = labels_per_key.index[labels_per_key.to_numpy() > 1]
        if not len(conflicting):
            return
        firsts = sorted(int(rows[hashes[rows] == h][0]) for h in conflicting)[:3]
        details = "; ".join(self._where(np.flatnonzero(hashes == hashes[first])) for first in firsts)
        more = f" (and {len(conflicting) - len(firsts)} more keys)" if len(conflicting) > len(firsts) else ""
        raise DataValidationError(
            f"the key column '{key}' (data.key) repeats {len(conflicting)} key(s) with different labels ('{label}'): "
            f"one key at {details}{more} (rows counting from 0 within each partition's files). A key names one "
            "example; deduplicate at the source (keep the correct label), or key by a column that is unique per example."
        )

    def _where(self, positions: np.ndarray) -> str:
        starts = np.array([b[0] for b in self.batches])
        per_part: dict[str, list[int]] = {}
        for pos in positions[:8]:
            start, part, in_part = self.batches[int(np.searchsorted(starts, pos, side="right")) - 1]
            per_part.setdefault(part, []).append(in_part + int(pos) - start)
        more = f" and {len(positions) - 8} more rows" if len(positions) > 8 else ""
        return ", ".join(f"partition {p} rows {', '.join(map(str, r))}" for p, r in per_part.items()) + more


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
    budget = max(MIN_PER_PARTITION, sample_rows // max(len(partitions), 1))
    out = Scan(sample=pd.DataFrame())
    samples: list[pd.DataFrame] = []
    current, sampler, splits, content, position = None, None, [], [], 0
    schema = Schema(label=label, key=key, numeric=[], categorical=[], classes=[])
    key_labels = _KeyLabels()
    for batch in iter_batches(data_uri, files, fmt):
        part = batch[PARTITION_COLUMN].iloc[0] if len(batch) else None
        if part != current and sampler is not None:
            samples.append(sampler.rows())
        if part != current:
            current, sampler = part, _PartitionSample(budget)
        out.rows[part] = out.rows.get(part, 0) + len(batch)
        counted = out.present.setdefault(part, {})
        for col, n in batch.drop(columns=[PARTITION_COLUMN]).notna().sum().items():
            counted[col] = counted.get(col, 0) + int(n)
        if label in batch.columns:
            out.label_nulls += int(batch[label].isna().sum())
        keys = split_keys(batch, schema, first_row=out.rows[part] - len(batch))  # errors name rows in the partition
        split = settings.assign(keys).to_numpy()
        splits.append(pd.Categorical(split, categories=SPLITS).codes.astype(np.int8))
        train = batch[split == "train"]
        for col in batch.columns:
            if col not in out.columns and col != PARTITION_COLUMN:  # absent from the batches before: null there
                out.columns[col] = ColumnTotals().add(None, position)
                out.train_columns[col] = ColumnTotals().add(None, int((np.concatenate(splits)[:position] == 0).sum()))
        for col, totals in out.columns.items():
            totals.add(batch[col] if col in batch.columns else None, len(batch))
            out.train_columns[col].add(train[col] if col in train.columns else None, len(train))
        columns = (features + ([label] if label is not None else []) if features
                   else [c for c in batch.columns if c not in (*INTERNAL_COLUMNS, key, "date")])
        content.append(content_hashes(batch, columns))
        labels = label_text(batch[label]) if label in batch.columns else pd.Series(None, index=batch.index)
        if key is not None and label is not None:
            key_labels.add(keys, labels, position, part, out.rows[part] - len(batch))
        priority = row_priority(batch.drop(columns=[PARTITION_COLUMN]), seed=seed, first_row=position).copy()
        priority[_stray_text(batch)] = 0  # rows the type checks must see are always in the sample
        strata = labels if stratify_by_label else pd.Series(None, index=batch.index, dtype=object)
        sampler.add(batch, strata, priority, np.arange(position, position + len(batch)))
        position += len(batch)
        if on_batch is not None:
            on_batch(len(batch), str(part or ""))
    if sampler is not None:
        samples.append(sampler.rows())
    if key is not None and label is not None:
        key_labels.check(key, label)
    for p in partitions:
        out.rows.setdefault(p, 0)
    sample = concat_partitions(samples) if samples else pd.DataFrame()
    out.weights = (sample["_weight"].to_numpy(dtype=np.float64) if "_weight" in sample.columns
                   else np.ones(len(sample)))
    out.sample = sample.drop(columns=["_priority", "_position", "_weight"], errors="ignore")
    out.splits = np.concatenate(splits) if splits else out.splits
    out.content = np.concatenate(content) if content else out.content
    return out


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
