"""A realistic tabular classification dataset as daily Parquet partitions, for demos and tests."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd

REGIONS = ["north", "south", "east", "west", "central"]
DEVICES = ["mobile", "desktop", "tablet"]
PLANS = ["free", "basic", "pro", "enterprise"]
CLASSES = ["churn", "downgrade", "stay", "upgrade"]
START_DATE = dt.date(2026, 1, 1)


def generate_day(day_index: int, rows: int, seed: int, drifted: bool, key_offset: int) -> pd.DataFrame:
    """One day of customer rows; the label depends non-linearly on the features, plus noise."""
    rng = np.random.default_rng([seed, day_index])
    shift = 1.0 if drifted else 0.0
    tenure = rng.gamma(2.0, 12.0 + 10.0 * shift, rows)
    monthly_spend = rng.lognormal(3.5 + 0.4 * shift, 0.5, rows)
    sessions = rng.poisson(20 - 8 * shift, rows).astype("float64")
    support_tickets = rng.poisson(1.5 + 1.5 * shift, rows).astype("int64")
    satisfaction = np.clip(rng.normal(3.5 - 0.8 * shift, 1.0, rows), 1.0, 5.0)
    region_p = [0.3, 0.2, 0.2, 0.2, 0.1] if not drifted else [0.05, 0.1, 0.15, 0.2, 0.5]
    region = rng.choice(REGIONS, rows, p=region_p)
    device = rng.choice(DEVICES, rows, p=[0.5, 0.4, 0.1] if not drifted else [0.8, 0.15, 0.05])
    plan = rng.choice(PLANS, rows, p=[0.4, 0.3, 0.2, 0.1])
    # A little missingness, as real data has.
    sessions[rng.random(rows) < 0.01] = np.nan

    plan_level = pd.Series(plan).map({p: i for i, p in enumerate(PLANS)}).to_numpy()
    s = np.nan_to_num(sessions, nan=20.0)
    score = (
        1.2 * np.tanh((satisfaction - 3.0) * 1.5)
        + 0.8 * np.sin(tenure / 10.0)
        - 0.5 * support_tickets * (satisfaction < 3)
        + 0.04 * (s - 20.0)
        + 0.3 * (device == "desktop")
        - 0.4 * (region == "central") * (plan_level < 2)
    )
    spend_signal = np.log(monthly_spend) - 3.5 + 0.5 * (plan_level - 1.5)
    score_noisy = score + rng.normal(0, 0.35, rows)
    label = np.where(
        score_noisy < -0.9,
        "churn",
        np.where(score_noisy < 0.2, np.where(spend_signal > 0.3, "downgrade", "stay"),
                 np.where(spend_signal > -0.2, "upgrade", "stay")),
    )
    return pd.DataFrame(
        {
            "customer_id": np.arange(key_offset, key_offset + rows, dtype="int64"),
            "tenure_months": tenure.round(2),
            "monthly_spend": monthly_spend.round(2),
            "sessions_last_30d": sessions,
            "support_tickets": support_tickets,
            "satisfaction": satisfaction.round(2),
            "region": region,
            "device": device,
            "plan": plan,
            "label": label,
        }
    )


def write_demo_data(
    out: str | Path, *, days: int = 7, rows_per_day: int = 1000, seed: int = 0, drift_from_day: int | None = None
) -> list[Path]:
    """Write ``days`` partitions ``out/date=YYYY-MM-DD/part-0.parquet``; return their paths."""
    if days < 1 or rows_per_day < 1:
        raise ValueError("days and rows_per_day must be >= 1")
    root = Path(out)
    paths = []
    for day in range(days):
        drifted = drift_from_day is not None and day >= drift_from_day
        frame = generate_day(day, rows_per_day, seed, drifted, key_offset=day * rows_per_day + seed * 10_000_000)
        paths.append(write_day_partition(root, day, frame))
    return paths


def write_day_partition(root: Path, day: int, frame: pd.DataFrame) -> Path:
    """Write ``frame`` as the ``date=`` partition ``day`` days after ``START_DATE``, atomically."""
    part = root / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
    part.parent.mkdir(parents=True, exist_ok=True)
    tmp = part.with_suffix(".parquet.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(part)  # a watcher never sees a half-written partition
    return part
