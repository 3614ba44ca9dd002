"""Reference statistics of a train split: what later data (drift, skew) is compared against.

The format is a contract with the drift watcher (``reference_stats.json`` beside the model)::

    {"rows": N,
     "numeric": {col: {"mean", "std", "null_fraction", "quantiles": [101 floats, q0..q100],
                       "sample": [<= 5000 floats, seeded]}},
     "categorical": {col: {"null_fraction", "frequencies": {value: count}}},
     "distributions": {name: {"labels": [k bin labels], "counts": [k, summed over rows],
                              "outer": [k x k: sum over rows of counts * counts^T],
                              "rows", "documents": rows with any count, "null_fraction"}}}

``distributions`` is present only for a task with ``drift_histograms`` (e.g. ``text__byte_unigram``: the
train split's counts of the 256 byte values, its number of documents, and the sums of products of each
document's counts, from which the watcher knows how much the histogram varies from document to document).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.data.stream_stats import NumericStats, TableStats, row_priority


class Schema(Protocol):
    """The part of ``snapshot.Schema`` the statistics need (snapshot.py imports this module)."""

    numeric: list[str]
    categorical: list[str]


SAMPLE_SIZE = 5000
SAMPLE_SEED = 0
QUANTILES = np.linspace(0.0, 1.0, 101)


def _numeric_stats(acc: NumericStats) -> dict[str, Any]:
    if acc.count == 0:
        return {"mean": None, "std": None, "null_fraction": acc.null_fraction, "quantiles": [], "sample": []}
    return {
        "mean": float(acc.mean),
        "std": float(acc.std),
        "null_fraction": float(acc.null_fraction),
        # Exact up to stream_stats.QUANTILE_SAMPLE finite values; a bottom-k sample's quantiles above.
        "quantiles": acc.quantiles(QUANTILES),
        "sample": [float(v) for v in acc.sample.first(SAMPLE_SIZE)],
    }


@dataclass
class HistogramStats:
    """Per-row counts over fixed bins (``Task.drift_histograms``) summed over a stream of record batches."""

    labels: list[str] = field(default_factory=list)
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # Sum over rows of counts x counts^T, in float64: squares of a long document's counts overflow int64 sums.
    outer: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    rows: int = 0
    documents: int = 0

    def add(self, per_row: pd.DataFrame) -> HistogramStats:
        """Add one batch's rows x bins counts (the bins must be the same in every batch)."""
        values = per_row.to_numpy(dtype=np.int64)
        if not self.labels:
            k = values.shape[1]
            self.labels = [str(c) for c in per_row.columns]
            self.counts, self.outer = np.zeros(k, dtype=np.int64), np.zeros((k, k))
        elif [str(c) for c in per_row.columns] != self.labels:
            raise ValueError(f"drift histogram bins changed between batches: {list(per_row.columns)[:5]}... "
                             f"instead of {self.labels[:5]}...")
        self.counts += values.sum(axis=0)
        as_float = values.astype(np.float64)
        self.outer += as_float.T @ as_float
        self.rows += len(values)
        self.documents += int((values.sum(axis=1) > 0).sum())
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"labels": self.labels, "counts": [int(c) for c in self.counts],
                # Sums of products of counts are whole numbers: as ints the 256 x 256 of bytes take ~1/3 less.
                "outer": [[int(v) for v in row] for row in self.outer], "rows": self.rows,
                "documents": self.documents,
                "null_fraction": (self.rows - self.documents) / self.rows if self.rows else 0.0}


def add_histograms(into: dict[str, HistogramStats], batch: dict[str, pd.DataFrame]) -> dict[str, HistogramStats]:
    """Add one batch of ``Task.drift_histograms`` to the running sums ``into`` (returned)."""
    for name, per_row in batch.items():
        into.setdefault(name, HistogramStats()).add(per_row)
    return into


def reference_stats_of(stats: TableStats, histograms: dict[str, HistogramStats] | None = None) -> dict[str, Any]:
    """The reference_stats.json document of streamed statistics (``TableStats`` of the train split), with
    the summed drift histograms when the task has any."""
    document = {
        "rows": int(stats.rows),
        "numeric": {col: _numeric_stats(acc) for col, acc in stats.numeric.items()},
        "categorical": {col: {"null_fraction": float(acc.null_fraction), "frequencies": acc.frequencies()}
                        for col, acc in stats.categorical.items()},
    }
    if histograms:
        document["distributions"] = {name: acc.to_dict() for name, acc in histograms.items()}
    return document


def table_stats(frame: pd.DataFrame, schema: Schema, *, seed: int = SAMPLE_SEED, first_row: int = 0) -> TableStats:
    """``TableStats`` of the schema's features over one frame (one batch of a stream whose first row is row
    ``first_row`` of the stream)."""
    columns = schema.numeric + schema.categorical
    return TableStats.for_columns(schema.numeric, schema.categorical).add(
        frame, row_priority(frame[columns], seed=seed, first_row=first_row))


def compute_reference_stats(frame: pd.DataFrame, schema: Schema, *, seed: int = SAMPLE_SEED) -> dict[str, Any]:
    """Statistics of ``frame`` (the train split) per feature column, in the reference_stats.json format.

    The numeric ``sample`` is the bottom-5000 sample by row priority (``stream_stats.BottomK``): seeded,
    and the same whether the rows arrive in one frame or in record batches.
    """
    return reference_stats_of(table_stats(frame, schema, seed=seed))


def write_reference_stats(path: str | Path, stats: dict[str, Any]) -> None:
    """Write ``stats`` as JSON (NaN-free: the format holds only finite numbers and nulls)."""
    atomic_write_text(path, json.dumps(stats, allow_nan=False))


def read_reference_stats(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
