"""Pass 1's accumulation, mergeable: the exact figures, the stratified sample and the per-row split and hashes.

``ScanPart`` folds record batches in (every file locally; one file in a Spark task) and ``merge`` joins the parts
of disjoint files in file order, giving what one pass over all of them gives: counts add, column totals merge
(a column a part never saw is null in all its rows), each partition's sample is the bottom of the union. So the
local engine (``scan.py``) and the Spark engine (``components/lib/spark/scan.py``) run the same code per batch.
The per-row arrays (splits, content hashes, key and label hashes for repeated keys) stay in the part locally; a
distributed engine takes them per batch from ``add`` and joins them itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.concat import concat_partitions
from ctpipe.components.lib.data.encoding import label_text
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.data.splits import (
    INTERNAL_COLUMNS,
    PARTITION_COLUMN,
    SPLITS,
    SplitSettings,
    split_keys,
)
from ctpipe.components.lib.data.stream_stats import ColumnTotals, row_priority
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


class PartitionSample:
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

    def merge(self, other: PartitionSample) -> PartitionSample:
        """Both samples' rows (of disjoint files of one partition): the same as one sample of all their batches."""
        out = PartitionSample(self.budget)
        for cls in {**self.keep, **other.keep}:
            out.counts[cls] = self.counts.get(cls, 0) + other.counts.get(cls, 0)
            both = [f for f in (self.keep.get(cls), other.keep.get(cls)) if f is not None]
            both = concat_partitions(both) if len(both) > 1 else both[0]
            out.keep[cls] = both.nsmallest(self.budget, ["_priority", "_position"])
        return out

    def rows(self) -> pd.DataFrame:
        """The sample, with ``_weight``: the rows of its partition and class that each sampled row stands for."""
        take = _allocate(self.counts, self.budget)
        parts = [self.keep[c].nsmallest(n, ["_priority", "_position"]).assign(_weight=self.counts[c] / n)
                 for c, n in take.items() if n]
        return concat_partitions(parts).sort_values("_position") if parts else pd.DataFrame()


class KeyLabels:
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
        places = []
        for first in firsts:
            positions = np.flatnonzero(hashes == hashes[first])
            places.append(rows_where([self._place(p) for p in positions[:8]], len(positions)))
        raise key_conflict_error(key, label, len(conflicting), places)

    def _place(self, pos: int) -> tuple[str, int]:
        starts = np.array([b[0] for b in self.batches])
        start, part, in_part = self.batches[int(np.searchsorted(starts, pos, side="right")) - 1]
        return part, in_part + int(pos) - start


def rows_where(places: list[tuple[str, int]], total: int) -> str:
    """Where a key's rows are: its first (up to 8) rows as (partition, row within it), of ``total``."""
    per_part: dict[str, list[int]] = {}
    for part, row in places[:8]:
        per_part.setdefault(part, []).append(row)
    more = f" and {total - 8} more rows" if total > 8 else ""
    return ", ".join(f"partition {p} rows {', '.join(map(str, r))}" for p, r in per_part.items()) + more


def key_conflict_error(key: str, label: str, conflicting: int, places: list[str]) -> DataValidationError:
    """The error for keys repeated with different labels (``places``: ``rows_where`` of the first three)."""
    more = f" (and {conflicting - len(places)} more keys)" if conflicting > len(places) else ""
    return DataValidationError(
        f"the key column '{key}' (data.key) repeats {conflicting} key(s) with different labels ('{label}'): "
        f"one key at {'; '.join(places)}{more} (rows counting from 0 within each partition's files). A key names one "
        "example; deduplicate at the source (keep the correct label), or key by a column that is unique per example."
    )




class ScanPart:
    """Pass 1 over some files' batches in file order, from global row ``position``; ``in_part``: the rows of each
    partition in files before these (so errors and the window count rows within the partition). ``keep_rows``:
    hold the per-row arrays (the local engine) or leave them to the caller (``add`` returns them)."""

    def __init__(self, *, label: str | None, key: str | None, features: list[str], settings: SplitSettings,
                 budget: int, seed: int = 0, stratify_by_label: bool = True, keep_rows: bool = True,
                 position: int = 0, in_part: dict[str, int] | None = None) -> None:
        self.label, self.key, self.features, self.settings = label, key, features, settings
        self.budget, self.seed, self.stratify_by_label, self.keep_rows = budget, seed, stratify_by_label, keep_rows
        self.schema = Schema(label=label, key=key, numeric=[], categorical=[], classes=[])
        self.position, self.seen, self.train_seen = position, 0, 0
        self.offset = dict(in_part or {})
        self.rows: dict[str, int] = {}
        self.present: dict[str, dict[str, int]] = {}
        self.label_nulls = 0
        self.columns: dict[str, ColumnTotals] = {}
        self.train_columns: dict[str, ColumnTotals] = {}
        self.samplers: dict[str, PartitionSample] = {}
        self.split_counts: dict[str, np.ndarray] = {}
        self.splits: list[np.ndarray] = []
        self.content: list[np.ndarray] = []
        self.key_labels = KeyLabels()

    def add(self, batch: pd.DataFrame) -> dict[str, np.ndarray]:
        """Fold one batch in; returns its rows' split codes, content hashes, key and label hashes, row in partition."""
        part = batch[PARTITION_COLUMN].iloc[0] if len(batch) else None
        sampler = self.samplers.setdefault(part, PartitionSample(self.budget))
        self.rows[part] = self.rows.get(part, 0) + len(batch)
        in_part = self.offset.get(part, 0) + self.rows[part] - len(batch)
        counted = self.present.setdefault(part, {})
        for col, n in batch.drop(columns=[PARTITION_COLUMN]).notna().sum().items():
            counted[col] = counted.get(col, 0) + int(n)
        label, key = self.label, self.key
        if label in batch.columns:
            self.label_nulls += int(batch[label].isna().sum())
        keys = split_keys(batch, self.schema, first_row=in_part)  # errors name rows in the partition
        split = self.settings.assign(keys).to_numpy()
        codes = pd.Categorical(split, categories=SPLITS).codes.astype(np.int8)
        self.split_counts[part] = self.split_counts.get(part, np.zeros(3, dtype=np.int64)) + np.bincount(codes, minlength=3)
        train = batch[split == "train"]
        for col in batch.columns:
            if col not in self.columns and col != PARTITION_COLUMN:  # absent from the batches before: null there
                self.columns[col] = ColumnTotals().add(None, self.seen)
                self.train_columns[col] = ColumnTotals().add(None, self.train_seen)
        for col, totals in self.columns.items():
            totals.add(batch[col] if col in batch.columns else None, len(batch))
            self.train_columns[col].add(train[col] if col in train.columns else None, len(train))
        columns = (self.features + ([label] if label is not None else []) if self.features
                   else [c for c in batch.columns if c not in (*INTERNAL_COLUMNS, key, "date")])
        content = content_hashes(batch, columns)
        labels = label_text(batch[label]) if label in batch.columns else pd.Series(None, index=batch.index)
        rows = {"split": codes, "content": content, "row": np.arange(in_part, in_part + len(batch), dtype=np.int64)}
        if key is not None and label is not None:
            if self.keep_rows:
                self.key_labels.add(keys, labels, self.position, part, in_part)
            rows["key"] = pd.util.hash_array(keys.to_numpy(dtype=object))
            rows["label"] = pd.util.hash_array(labels.fillna(_NULL_LABEL).to_numpy(dtype=object))
        if self.keep_rows:
            self.splits.append(codes)
            self.content.append(content)
        priority = row_priority(batch.drop(columns=[PARTITION_COLUMN]), seed=self.seed, first_row=self.position).copy()
        priority[_stray_text(batch)] = 0  # rows the type checks must see are always in the sample
        strata = labels if self.stratify_by_label else pd.Series(None, index=batch.index, dtype=object)
        sampler.add(batch, strata, priority, np.arange(self.position, self.position + len(batch)))
        self.position += len(batch)
        self.seen += len(batch)
        self.train_seen += len(train)
        return rows

    def merge(self, later: ScanPart) -> ScanPart:
        """This part followed by ``later`` (the parts of the files after this one's), in place."""
        for p, n in later.rows.items():
            self.rows[p] = self.rows.get(p, 0) + n
        for p, cols in later.present.items():
            mine = self.present.setdefault(p, {})
            for c, n in cols.items():
                mine[c] = mine.get(c, 0) + n
        self.label_nulls += later.label_nulls
        for totals, seen, other, other_seen in ((self.columns, self.seen, later.columns, later.seen),
                                                (self.train_columns, self.train_seen, later.train_columns,
                                                 later.train_seen)):
            for col in other:
                if col not in totals:
                    totals[col] = ColumnTotals().add(None, seen)
            for col in totals:
                totals[col] = totals[col].merge(other[col] if col in other else ColumnTotals().add(None, other_seen))
        for p, sampler in later.samplers.items():
            self.samplers[p] = self.samplers[p].merge(sampler) if p in self.samplers else sampler
        for p, counts in later.split_counts.items():
            self.split_counts[p] = self.split_counts.get(p, np.zeros(3, dtype=np.int64)) + counts
        self.splits += later.splits
        self.content += later.content
        self.position, self.seen, self.train_seen = later.position, self.seen + later.seen, self.train_seen + later.train_seen
        return self

    def to_scan(self, partitions: list[str]) -> Scan:
        """The pass's result (raising the error of a key repeated with different labels, when rows were kept)."""
        if self.keep_rows and self.key is not None and self.label is not None:
            self.key_labels.check(self.key, self.label)
        out = Scan(sample=pd.DataFrame(), rows=dict(self.rows), label_nulls=self.label_nulls, columns=self.columns,
                   train_columns=self.train_columns, present=self.present)
        for p in partitions:
            out.rows.setdefault(p, 0)
        samples = [s.rows() for s in self.samplers.values()]
        sample = concat_partitions(samples) if samples else pd.DataFrame()
        out.weights = (sample["_weight"].to_numpy(dtype=np.float64) if "_weight" in sample.columns
                       else np.ones(len(sample)))
        out.sample = sample.drop(columns=["_priority", "_position", "_weight"], errors="ignore")
        if self.keep_rows:
            out.splits = np.concatenate(self.splits) if self.splits else out.splits
            out.content = np.concatenate(self.content) if self.content else out.content
        else:
            totals = sum(self.split_counts.values(), np.zeros(3, dtype=np.int64))
            out.split_totals = {s: int(totals[i]) for i, s in enumerate(SPLITS)}
            out.train_per_partition = {p: int(self.split_counts.get(p, np.zeros(3))[0]) for p in out.rows}
        return out
