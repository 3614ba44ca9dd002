"""Streaming column statistics: accumulate one record batch at a time, merge partial results, finish.

Every statistic here has the shape of an Apache Beam ``CombineFn`` (the shape TFDV's statistics run in):
``add`` folds one batch into an accumulator, ``merge`` combines two accumulators built on disjoint rows
(other batches, files, workers), and a finishing method turns the result into plain values. So the same
code runs over the record batches of one pod, or, past one pod, as a ``CombineFn`` on Beam/Spark.

What is exact and what is sketched:

- exact: row counts, null counts, min/max, mean and variance (Chan et al.'s pairwise update; merging
  partial results agrees with one pass to float rounding), category frequencies (memory grows with the
  number of distinct categories, which the validation suite bounds for the columns it profiles);
- ``BottomK`` (a sample): the ``k`` values whose rows have the smallest 64-bit hash priority. The
  priority is a hash of the row's content and its position in the stream (``row_priority``), so the
  sample does not depend on batch boundaries, merging is exact (the bottom k of a union), the same data in
  the same order gives the same sample, and a sample is a uniform draw without replacement, also where
  rows repeat. Below ``k`` values it holds all of them, so
  quantiles are exact; above, a quantile's rank error has standard deviation at most ``0.5/sqrt(k)``
  (0.16% at the default ``k`` of 100,000);
- ``DistinctCount`` (KMV, "k minimum values"): the ``k`` smallest 64-bit hashes of the distinct values;
  exact below ``k`` distinct values, else ``(k - 1) / u_k`` with a relative standard error of about
  ``1/sqrt(k - 2)`` (1% at ``k`` = 10,000). Deterministic, unlike randomised sketches (KLL, HLL) whose
  results change from run to run, which a reference statistic stored beside a model must not.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

QUANTILE_SAMPLE = 100_000
DISTINCT_K = 10_000
_U64 = float(2**64)


def row_priority(frame: pd.DataFrame, *, seed: int = 0, first_row: int = 0) -> np.ndarray:
    """A 64-bit priority per row from its content, its position in the stream (``first_row`` + its index in
    ``frame``) and ``seed``. The position makes copies of a row independent: with the content alone every
    copy got the same priority, so data whose rows repeat (discrete features) had a "sample" made of all the
    copies of the few rows with the lowest hashes."""
    key = f"ctpipe{seed:010d}"[-16:]
    if frame.shape[1] == 0:
        # No feature columns (a text task's schema): the position alone. pandas before 3.1 raises on hashing a
        # frame without columns; pandas 3.1 gives every row one constant.
        content = np.zeros(len(frame), dtype=np.uint64)
    else:
        content = pd.util.hash_pandas_object(frame, index=False, hash_key=key).to_numpy(dtype=np.uint64)
    position = pd.util.hash_array(np.arange(first_row, first_row + len(frame), dtype=np.int64))
    return content ^ (position * np.uint64(0x9E3779B97F4A7C15))  # wraps mod 2**64


_INTEGRAL_NUMBER_TEXT = re.compile(r"-?\d+\.0")


def category_key(text: str) -> str:
    """The key a categorical value is counted, encoded and compared by: its text, with the ``.0`` of an integral
    number dropped (``17.0`` → ``17``, ``-0.0`` → ``0``). One null turns an integer column into float64, so
    ``17`` and ``17.0`` are one category; stored vocabularies and reference frequencies written before this
    rule (``17.0``) are read through it too."""
    if _INTEGRAL_NUMBER_TEXT.fullmatch(text):
        text = text[:-2]
        return "0" if text == "-0" else text
    return text


def category_counts(values: pd.Series) -> pd.Series:
    """Rows per ``category_key`` of the non-null ``values`` (the keys of the distinct texts only are computed)."""
    counts = values.dropna().astype(str).value_counts()
    return counts.groupby(counts.index.map(category_key), sort=False).sum()


def category_keys(values: pd.Series) -> pd.Series:
    """``category_key`` of every value (nulls stay null), same index."""
    codes, uniques = pd.factorize(values.astype(str).where(values.notna()), use_na_sentinel=True)
    keys = np.array([category_key(u) for u in uniques] + [None], dtype=object)
    return pd.Series(keys[codes], index=values.index, dtype=object)


def value_hashes(values: pd.Series) -> np.ndarray:
    """64-bit hashes of values as text (a category and its string have the same hash)."""
    return pd.util.hash_array(values.astype(str).to_numpy(dtype=object))


# --- a sample: the bottom k by row priority ----------------------------------------------------


@dataclass
class BottomK:
    """The values of the ``k`` rows with the smallest priority (ties by value); see the module docstring.

    Rows are buffered and cut back to ``k`` (a linear-time partition) only when the buffer passes ``2k``,
    so a batch costs O(batch) amortised; ``finish`` sorts once.
    """

    k: int = QUANTILE_SAMPLE
    priority: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))
    values: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.float64))
    _sorted: bool = True

    def add(self, values: np.ndarray, priority: np.ndarray) -> BottomK:
        self.priority = np.concatenate([self.priority, priority.astype(np.uint64)])
        self.values = np.concatenate([self.values, values.astype(np.float64)])
        self._sorted = False
        if len(self.priority) > 2 * self.k:
            self._cut()
        return self

    def merge(self, other: BottomK) -> BottomK:
        return BottomK(self.k, self.priority, self.values, self._sorted).add(other.values, other.priority)

    def _cut(self) -> None:
        if len(self.priority) > self.k:
            # Equal priorities mean equal rows (a content hash), so which of them is kept does not matter.
            keep = np.argpartition(self.priority, self.k - 1)[: self.k]
            self.priority, self.values = self.priority[keep], self.values[keep]

    def finish(self) -> BottomK:
        """Cut to ``k`` and sort by (priority, value): the sample as a plain, comparable array."""
        if not self._sorted:
            self._cut()
            order = np.lexsort((self.values, self.priority))
            self.priority, self.values, self._sorted = self.priority[order], self.values[order], True
        return self

    def first(self, n: int) -> np.ndarray:
        """The bottom-``n`` sample (``n`` <= k): a uniform sample of ``n`` values, in priority order."""
        return self.finish().values[:n]


# --- distinct values: KMV -------------------------------------------------------------------------


@dataclass
class DistinctCount:
    """Distinct values seen: exact below ``k`` of them, estimated from the k minimum hashes above."""

    k: int = DISTINCT_K
    hashes: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint64))

    def add(self, hashes: np.ndarray) -> DistinctCount:
        merged = np.unique(np.concatenate([self.hashes, hashes.astype(np.uint64)]))
        self.hashes = merged[: self.k]
        return self

    def merge(self, other: DistinctCount) -> DistinctCount:
        return DistinctCount(self.k, self.hashes.copy()).add(other.hashes)

    def estimate(self) -> float:
        if len(self.hashes) < self.k:
            return float(len(self.hashes))
        return (self.k - 1) / ((float(self.hashes[-1]) + 1.0) / _U64)


# --- numeric columns ---------------------------------------------------------------------------

# The model reads features as float32 (data/encoding.py): a finite float64 beyond its range (1e308) would
# reach it as inf, and its square overflows a variance. Such values count as missing, as inf and NaN do, in
# every statistic here and in the encoding; profiled ranges leave them out, so validation flags them.
PROFILE_LIMIT = float(np.finfo(np.float32).max)


def profilable(values: np.ndarray) -> np.ndarray:
    """Which of ``values`` (float64) a statistic or a profiled range may use: finite and within float32's range."""
    return np.isfinite(values) & (np.abs(values) <= PROFILE_LIMIT)



def merged_moments(count: int, mean: float, m2: float, other_count: int, other_mean: float,
                   other_m2: float) -> tuple[int, float, float]:
    """Count, mean and sum of squared deviations of two parts together (Chan et al.'s pairwise update)."""
    n = count + other_count
    if not other_count:
        return n, mean, m2
    delta = other_mean - mean
    return n, mean + delta * other_count / n, m2 + other_m2 + delta * delta * count * other_count / n


@dataclass
class NumericStats:
    """Rows, usable values (``profilable``; the rest count as missing), min/max, mean and M2, a quantile sample."""

    rows: int = 0
    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = np.inf
    max: float = -np.inf
    sample: BottomK = field(default_factory=BottomK)

    def add(self, series: pd.Series, priority: np.ndarray) -> NumericStats:
        values = pd.to_numeric(series, errors="coerce").astype("float64").to_numpy()
        finite = profilable(values)
        v = values[finite]
        batch = NumericStats(rows=len(values), count=len(v), sample=BottomK(self.sample.k))
        if len(v):
            batch.mean = float(v.mean())
            batch.m2 = float(((v - batch.mean) ** 2).sum())
            batch.min, batch.max = float(v.min()), float(v.max())
            batch.sample.add(v, priority[finite])
        return self._combine(batch)

    def merge(self, other: NumericStats) -> NumericStats:
        return NumericStats(self.rows, self.count, self.mean, self.m2, self.min, self.max, self.sample)._combine(other)

    def _combine(self, b: NumericStats) -> NumericStats:
        self.count, self.mean, self.m2 = merged_moments(self.count, self.mean, self.m2, b.count, b.mean, b.m2)
        self.rows += b.rows
        self.min, self.max = min(self.min, b.min), max(self.max, b.max)
        self.sample = self.sample.merge(b.sample)
        return self

    @property
    def std(self) -> float:
        return float(np.sqrt(self.m2 / self.count)) if self.count else 0.0

    @property
    def null_fraction(self) -> float:
        return 1.0 - self.count / self.rows if self.rows else 0.0

    def quantiles(self, qs: np.ndarray) -> list[float]:
        """Quantiles of the finite values (exact while they fit in the sample)."""
        return [float(q) for q in np.quantile(self.sample.finish().values, qs)] if self.count else []


# --- categorical columns -----------------------------------------------------------------------


@dataclass
class CategoricalStats:
    """Rows, nulls and the frequency of every value (by ``category_key``: ``17`` and ``17.0`` are one)."""

    rows: int = 0
    nulls: int = 0
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, series: pd.Series) -> CategoricalStats:
        self.rows += len(series)
        self.nulls += int(series.isna().sum())
        for value, n in category_counts(series).items():
            self.counts[value] = self.counts.get(value, 0) + int(n)
        return self

    def merge(self, other: CategoricalStats) -> CategoricalStats:
        out = CategoricalStats(self.rows, self.nulls, dict(self.counts))
        out.rows += other.rows
        out.nulls += other.nulls
        for value, n in other.counts.items():
            out.counts[value] = out.counts.get(value, 0) + n
        return out

    @property
    def null_fraction(self) -> float:
        return self.nulls / self.rows if self.rows else 0.0

    def frequencies(self) -> dict[str, int]:
        """Counts, most frequent first (ties by value), as pandas' value_counts orders them."""
        return dict(sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0])))


# --- exact per-column totals for the validation gates --------------------------------------------

MAX_TEXT_VALUES = 10_000


@dataclass
class ColumnTotals:
    """Over every row of a column: nulls, min/max of numeric values, counts of text values (while few).

    A column absent from a batch, or all null in it, counts as null there (and does not decide whether the
    column is numeric). The values of numeric batches are counted in ``numeric_values``, so that a text column
    one partition writes as numbers (category codes) still counts them. Text values are counted only while the column
    has at most ``MAX_TEXT_VALUES`` distinct ones (``counts`` becomes None past it: too many to judge
    a value set exactly, and the suite profiles no set that large).
    """

    rows: int = 0
    nulls: int = 0
    min: float = np.inf
    max: float = -np.inf
    counts: dict[str, int] | None = field(default_factory=dict)
    numeric: bool = True
    numeric_values: int = 0  # non-null values of numeric batches (not in ``counts``)
    # min/max of the values a profiled range may hold (``profilable``); ``min``/``max`` include infinities and
    # values beyond float32's range.
    finite_min: float = np.inf
    finite_max: float = -np.inf

    def add(self, series: pd.Series | None, rows: int) -> ColumnTotals:
        self.rows += rows
        if series is None:
            self.nulls += rows
            return self
        nulls = int(series.isna().sum())
        self.nulls += nulls
        if nulls == len(series):  # no value (Arrow's null type reads as object): says nothing of the column's type
            return self
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            self.numeric_values += len(series) - nulls
            values = series.to_numpy(dtype="float64", na_value=np.nan)
            if np.isfinite(values).any() or np.isinf(values).any():
                self.min = min(self.min, float(np.nanmin(values)))
                self.max = max(self.max, float(np.nanmax(values)))
            finite = values[profilable(values)]
            if len(finite):
                self.finite_min = min(self.finite_min, float(finite.min()))
                self.finite_max = max(self.finite_max, float(finite.max()))
            return self
        self.numeric = False
        if self.counts is not None:
            for value, n in series.dropna().astype(str).value_counts().items():
                self.counts[value] = self.counts.get(value, 0) + int(n)
            if len(self.counts) > MAX_TEXT_VALUES:
                self.counts = None
        return self


    def merge(self, other: ColumnTotals) -> ColumnTotals:
        """The totals of both (disjoint rows; in either order: ``counts`` is None once they hold too many)."""
        counts = None
        if self.counts is not None and other.counts is not None:
            counts = dict(self.counts)
            for value, n in other.counts.items():
                counts[value] = counts.get(value, 0) + n
            if len(counts) > MAX_TEXT_VALUES:
                counts = None
        return ColumnTotals(self.rows + other.rows, self.nulls + other.nulls, min(self.min, other.min),
                            max(self.max, other.max), counts, self.numeric and other.numeric,
                            self.numeric_values + other.numeric_values, min(self.finite_min, other.finite_min),
                            max(self.finite_max, other.finite_max))


# --- a table -------------------------------------------------------------------------------------


@dataclass
class TableStats:
    """The statistics of a schema's feature columns over a stream of record batches."""

    numeric: dict[str, NumericStats] = field(default_factory=dict)
    categorical: dict[str, CategoricalStats] = field(default_factory=dict)
    rows: int = 0

    @classmethod
    def for_columns(cls, numeric: list[str], categorical: list[str]) -> TableStats:
        return cls({c: NumericStats() for c in numeric}, {c: CategoricalStats() for c in categorical})

    def add(self, batch: pd.DataFrame, priority: np.ndarray | None = None, *, first_row: int | None = None) -> TableStats:
        """Fold one batch in; ``priority`` (``row_priority`` of the batch's rows) picks the quantile sample. Without
        it, the rows' stream positions start at ``first_row`` (default: the rows this accumulator has seen)."""
        if priority is None:
            priority = row_priority(batch[list(self.numeric) + list(self.categorical)],
                                    first_row=self.rows if first_row is None else first_row)
        self.rows += len(batch)
        for col, acc in self.numeric.items():
            acc.add(batch[col], priority)
        for col, acc in self.categorical.items():
            acc.add(batch[col])
        return self

    def merge(self, other: TableStats) -> TableStats:
        return TableStats({c: a.merge(other.numeric[c]) for c, a in self.numeric.items()},
                          {c: a.merge(other.categorical[c]) for c, a in self.categorical.items()},
                          self.rows + other.rows)

    def summary(self) -> dict[str, Any]:
        """Exact figures per column, for tests and reports."""
        return {
            "rows": self.rows,
            "numeric": {c: {"count": a.count, "mean": a.mean, "std": a.std, "min": a.min, "max": a.max}
                        for c, a in self.numeric.items()},
            "categorical": {c: {"nulls": a.nulls, "counts": a.frequencies()} for c, a in self.categorical.items()},
        }
