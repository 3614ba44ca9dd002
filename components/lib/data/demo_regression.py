"""The ``tabular_regression`` demo: the tabular demo's customers with a continuous label, next month's spend.

    ctpipe demo-data --task tabular_regression --out spend   # then: ctpipe run --data spend --task tabular_regression
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ctpipe.components.lib.data.demo import PLANS, generate_day, write_day_partition

LABEL = "spend_next_month"
# The settings that go with this data (``Task.demo_settings``): its key and its label.
DEMO_SETTINGS = ("data.key=customer_id", f"data.label={LABEL}")


def write_regression_demo(out: str | Path, *, days: int = 7, rows_per_day: int = 1000, seed: int = 0,
                          drift_from_day: int | None = None) -> list[Path]:
    """Write ``days`` partitions whose label is next month's spend in currency units (a non-linear function
    of spend, plan, satisfaction and tickets, plus noise); return their paths."""
    if days < 1 or rows_per_day < 1:
        raise ValueError("days and rows_per_day must be >= 1")
    paths = []
    for day in range(days):
        drifted = drift_from_day is not None and day >= drift_from_day
        frame = generate_day(day, rows_per_day, seed, drifted, key_offset=day * rows_per_day + seed * 10_000_000)
        rng = np.random.default_rng([seed, day, 1])
        plan_level = frame["plan"].map({p: i for i, p in enumerate(PLANS)}).to_numpy()
        spend = frame["monthly_spend"].to_numpy()
        factor = (1.0 + 0.15 * np.tanh(frame["satisfaction"].to_numpy() - 3.0) + 0.05 * plan_level
                  - 0.04 * frame["support_tickets"].to_numpy())
        frame[LABEL] = np.clip(spend * factor + rng.normal(0.0, 3.0, len(frame)), 0.0, None).round(2)
        paths.append(write_day_partition(Path(out), day, frame.drop(columns=["label"])))
    return paths
