"""Reference statistics of a train split: what later data (drift, skew) is compared against.

The format is a contract with the drift watcher (``reference_stats.json`` beside the model)::

    {"rows": N,
     "numeric": {col: {"mean", "std", "null_fraction", "quantiles": [101 floats, q0..q100],
                       "sample": [<= 5000 floats, seeded]}},
     "categorical": {col: {"null_fraction", "frequencies": {value: count}}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from components.data.stream_stats import NumericStats, TableStats, row_priority


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


def reference_stats_of(stats: TableStats) -> dict[str, Any]:
    """The reference_stats.json document of streamed statistics (``TableStats`` of the train split)."""
    return {
        "rows": int(stats.rows),
        "numeric": {col: _numeric_stats(acc) for col, acc in stats.numeric.items()},
        "categorical": {col: {"null_fraction": float(acc.null_fraction), "frequencies": acc.frequencies()}
                        for col, acc in stats.categorical.items()},
    }


def table_stats(frame: pd.DataFrame, schema: Schema, *, seed: int = SAMPLE_SEED) -> TableStats:
    """``TableStats`` of the schema's features over one frame (one batch of a stream)."""
    columns = schema.numeric + schema.categorical
    return TableStats.for_columns(schema.numeric, schema.categorical).add(
        frame, row_priority(frame[columns], seed=seed))


def compute_reference_stats(frame: pd.DataFrame, schema: Schema, *, seed: int = SAMPLE_SEED) -> dict[str, Any]:
    """Statistics of ``frame`` (the train split) per feature column, in the reference_stats.json format.

    The numeric ``sample`` is the bottom-5000 sample by row priority (``stream_stats.BottomK``): seeded,
    and the same whether the rows arrive in one frame or in record batches.
    """
    return reference_stats_of(table_stats(frame, schema, seed=seed))


def write_reference_stats(path: str | Path, stats: dict[str, Any]) -> None:
    """Write ``stats`` as JSON (NaN-free: the format holds only finite numbers and nulls)."""
    Path(path).write_text(json.dumps(stats, allow_nan=False))


def read_reference_stats(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
