"""Synthetic binary datasets whose best attainable answer is known, for the gate tests and benchmarks/gates.py.

The demo data (``demo.py``) has a strong four-class signal; real data is often harder. These two shapes
are the ones where a gate's false alarms hide:

* ``weak_signal_day``: P(yes | x) = sigmoid(beta * x1); with the default beta the best possible model
  lowers the log loss of the prior predictor by about 1% (``bayes_relative_gain``).
* ``rare_positive_day``: about 0.6% positives, with a real signal in two features.

Both have a key (``customer_id``), numeric noise features and a categorical column, like the demo data.
Beside them: ``mixed_type_rows`` and ``write_partition`` for the stable-split tests and gate cases, and
``drift_window`` for the drift tests.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.demo import START_DATE

WEAK_SIGNAL_BETA = 0.24
RARE_POSITIVE_INTERCEPT = -6.15
SEGMENTS = ["a", "b", "c", "d"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _frame(rng: np.random.Generator, rows: int, key_offset: int, p_yes: Callable[[pd.DataFrame], np.ndarray]):
    frame = pd.DataFrame({
        "customer_id": np.arange(key_offset, key_offset + rows, dtype="int64"),
        "x1": rng.normal(0.0, 1.0, rows).round(4),
        "x2": rng.normal(0.0, 1.0, rows).round(4),
        "x3": rng.gamma(2.0, 3.0, rows).round(3),
        "segment": rng.choice(SEGMENTS, rows),
    })
    frame["label"] = np.where(rng.random(rows) < p_yes(frame), "yes", "no")
    return frame


def weak_signal_day(day: int, rows: int, seed: int, *, beta: float = WEAK_SIGNAL_BETA) -> pd.DataFrame:
    """One partition of the weak-signal data: only x1 carries (a little) information about the label."""
    rng = np.random.default_rng([seed, day, 1])
    return _frame(rng, rows, (seed * 1000 + day) * rows, lambda f: _sigmoid(beta * f["x1"].to_numpy()))


def rare_positive_day(day: int, rows: int, seed: int, *, intercept: float = RARE_POSITIVE_INTERCEPT) -> pd.DataFrame:
    """One partition of the rare-positive data (about 0.6% 'yes'): x1 and segment 'c' raise the odds."""
    rng = np.random.default_rng([seed, day, 2])

    def p_yes(f: pd.DataFrame) -> np.ndarray:
        return _sigmoid(intercept + 1.2 * f["x1"].to_numpy() + 1.0 * (f["segment"] == "c").to_numpy())

    return _frame(rng, rows, (seed * 1000 + day) * rows, p_yes)


def bayes_relative_gain(beta: float = WEAK_SIGNAL_BETA, draws: int = 2_000_000) -> float:
    """Log-loss gain of the true P(yes | x1) over the prior predictor, relative to the prior's loss."""
    p = _sigmoid(beta * np.random.default_rng(0).normal(0.0, 1.0, draws))
    prior = float(p.mean())

    def entropy(q):
        return -(q * np.log(q) + (1 - q) * np.log(1 - q))

    return float((entropy(prior) - entropy(p).mean()) / entropy(prior))


def write_partitions(out: str | Path, day_frame: Callable[[int, int, int], pd.DataFrame], *, days: int,
                     rows_per_day: int, seed: int = 0) -> list[Path]:
    """Write ``days`` partitions ``out/date=YYYY-MM-DD/part-0.parquet`` of ``day_frame(day, rows, seed)``."""
    paths = []
    for day in range(days):
        part = Path(out) / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        day_frame(day, rows_per_day, seed).to_parquet(part, index=False)
        paths.append(part)
    return paths


# --- drift windows ---------------------------------------------------------------------------------

DRIFT_SHIFTS = ("none", "numeric", "categories", "unseen", "nulls")
MANY_CATEGORIES = 200


def mixed_type_rows(rng: np.random.Generator, rows: int, first_id: int) -> pd.DataFrame:
    """Rows with int, float, string and bool columns, a unique int ``customer_id`` and a two-class label.

    The raw material of the stable-split tests and gate cases: each column type is one that a later
    partition may store differently (a null turning int into float, category vs object, CSV vs Parquet).
    """
    return pd.DataFrame({
        "customer_id": np.arange(first_id, first_id + rows, dtype="int64"),
        "tickets": rng.integers(0, 6, rows).astype("int64"),
        "spend": rng.lognormal(3, 0.5, rows).round(2),
        "ratio": rng.random(rows),
        "region": rng.choice(["north", "south", "east"], rows),
        "active": rng.random(rows) < 0.5,
        "label": rng.choice(["a", "b"], rows),
    })


def write_partition(root: str | Path, day: str, frame: pd.DataFrame, fmt: str = "parquet") -> Path:
    """Write ``frame`` as the one file of partition ``root/date=DAY`` (``part-0.parquet`` or ``part-0.csv``)."""
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"fmt must be 'parquet' or 'csv', not {fmt!r}")
    part = Path(root) / f"date={day}"
    part.mkdir(parents=True)
    path = part / f"part-0.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path, index=False)
    return path


def drift_window(rows: int, seed: int, shift: str = "none") -> pd.DataFrame:
    """A window of rows for the drift tests: two numeric columns, a 4-category and a 200-category column.

    ``shift`` moves one aspect of the distribution: ``numeric`` (amount's mean up by half a standard deviation),
    ``categories`` (the 200 categories' frequencies reversed), ``unseen`` (10% of rows in categories the
    reference never had), ``nulls`` (90% of ``amount`` missing); ``none`` draws from the reference's
    distribution. ``city`` follows a Zipf-like law, so most of its categories are rare in a small window.
    """
    if shift not in DRIFT_SHIFTS:
        raise ValueError(f"unknown shift {shift!r}; one of {DRIFT_SHIFTS}")
    rng = np.random.default_rng([seed, 3])
    weights = 1.0 / np.arange(1, MANY_CATEGORIES + 1)
    if shift == "categories":
        weights = weights[::-1]
    city = rng.choice([f"city-{i:03d}" for i in range(MANY_CATEGORIES)], rows, p=weights / weights.sum())
    if shift == "unseen":
        city = np.where(rng.random(rows) < 0.1, np.char.add("new-", rng.integers(0, 50, rows).astype(str)), city)
    amount = rng.normal(0.5 if shift == "numeric" else 0.0, 1.0, rows)
    amount[rng.random(rows) < (0.9 if shift == "nulls" else 0.02)] = np.nan
    return pd.DataFrame({
        "amount": amount,
        "visits": rng.poisson(4.0, rows).astype("float64"),
        "plan": rng.choice(["free", "basic", "pro", "team"], rows, p=[0.4, 0.3, 0.2, 0.1]),
        "city": city,
    })
