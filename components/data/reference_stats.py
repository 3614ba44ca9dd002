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
from typing import Any

import numpy as np
import pandas as pd

from components.data.snapshot import Schema

SAMPLE_SIZE = 5000
SAMPLE_SEED = 0


def _numeric_stats(series: pd.Series, seed: int) -> dict[str, Any]:
    values = pd.to_numeric(series, errors="coerce").astype("float64").to_numpy()
    n = len(values)
    finite = values[np.isfinite(values)]
    null_fraction = float(1.0 - len(finite) / n) if n else 0.0
    if len(finite) == 0:
        return {"mean": None, "std": None, "null_fraction": null_fraction, "quantiles": [], "sample": []}
    quantiles = np.quantile(finite, np.linspace(0.0, 1.0, 101))
    rng = np.random.default_rng(seed)
    sample = finite if len(finite) <= SAMPLE_SIZE else rng.choice(finite, SAMPLE_SIZE, replace=False)
    return {
        "mean": float(finite.mean()),
        "std": float(finite.std(ddof=0)),
        "null_fraction": null_fraction,
        "quantiles": [float(q) for q in quantiles],
        "sample": [float(v) for v in sample],
    }


def _categorical_stats(series: pd.Series) -> dict[str, Any]:
    n = len(series)
    counts = series.dropna().astype(str).value_counts()
    return {
        "null_fraction": float(series.isna().sum() / n) if n else 0.0,
        "frequencies": {str(k): int(v) for k, v in counts.items()},
    }


def compute_reference_stats(frame: pd.DataFrame, schema: Schema, *, seed: int = SAMPLE_SEED) -> dict[str, Any]:
    """Statistics of ``frame`` (the train split) per feature column, in the reference_stats.json format."""
    return {
        "rows": int(len(frame)),
        "numeric": {col: _numeric_stats(frame[col], seed) for col in schema.numeric},
        "categorical": {col: _categorical_stats(frame[col]) for col in schema.categorical},
    }


def write_reference_stats(path: str | Path, stats: dict[str, Any]) -> None:
    """Write ``stats`` as JSON (NaN-free: the format holds only finite numbers and nulls)."""
    Path(path).write_text(json.dumps(stats, allow_nan=False))


def read_reference_stats(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
