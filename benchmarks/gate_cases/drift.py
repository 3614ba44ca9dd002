"""Drift gate cases: windows of several sizes from the reference's own distribution, and shifted ones.

``compute_drift`` with the default ``watch`` thresholds; ``blocked`` is "the report says drift". The
reference has a 200-category Zipf-like column (most categories rare in a small window, where PSI over
raw categories used to fire on sampling noise), a 4-category one and two numeric columns. Shifts: the
numeric mean by half a standard deviation, the 200 categories' frequencies reversed, 10% of rows in
categories the reference never saw, 90% nulls. A 0.5% flag turning 50% in a 200-row window (every
category but one rare there) and a same-distribution window stored as float32. Plus the demo generator:
undrifted and drifted days against five reference days.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.reference_stats import compute_reference_stats
from ctpipe.components.lib.data.simulate import drift_window
from ctpipe.components.lib.data.snapshot import Schema, infer_schema
from ctpipe.components.lib.drift.feature_drift import DriftReport, compute_drift

HEALTHY_SIZES = (200, 1000, 5000, 20_000)
SHIFTED_SIZES = (200, 1000, 20_000)


def _detail(report: DriftReport) -> str:
    if report.drifted_columns:
        return "drifted: " + ", ".join(
            f"{c} ({report.columns[c].statistic} {report.columns[c].value:.3g})" for c in report.drifted_columns)
    top = max(report.columns.values(), key=lambda c: c.value / c.threshold if c.threshold else 0.0)
    return f"no drift; closest: {top.column} {top.statistic} {top.value:.3g} vs {top.threshold:g}"


def _case(name: str, report: DriftReport, shifted: bool) -> dict:
    return {"name": name, "gate": "drift", "expected_block": shifted, "blocked": report.drifted,
            "detail": _detail(report)}


def cases(seed: int) -> list[dict]:
    watch = WatchConfig()
    schema = Schema(label="label", key=None, numeric=["amount", "visits"], categorical=["plan", "city"], classes=[])
    reference = compute_reference_stats(drift_window(20_000, 10_000 + seed), schema)
    found = []
    for rows in HEALTHY_SIZES:
        for s in (seed, seed + 1):
            found.append(_case(f"same distribution, {rows} rows, window seed {s}",
                               compute_drift(drift_window(rows, s), reference, watch), False))
    for shift in ("numeric", "categories", "unseen", "nulls"):
        for rows in SHIFTED_SIZES:
            found.append(_case(f"shifted ({shift}), {rows} rows",
                               compute_drift(drift_window(rows, seed, shift), reference, watch), True))
    # A flag that is 'yes' on 0.5% of the reference (every category but one rare in a small window) and a
    # discrete rate column; the window's rate stored as float32 (0.1 reads as 0.10000000149) is the same data.
    rng = np.random.default_rng([seed, 7])
    small = Schema(label=None, key=None, numeric=["rate"], categorical=["flag"], classes=[])
    levels = [0.1, 0.2, 0.3, 0.7]
    flag_reference = compute_reference_stats(pd.DataFrame({
        "flag": rng.choice(["no", "yes"], 20_000, p=[0.995, 0.005]), "rate": rng.choice(levels, 20_000)}), small)
    for share, rows in ((0.005, 200), (0.5, 200)):
        window = pd.DataFrame({"flag": rng.choice(["no", "yes"], rows, p=[1 - share, share]),
                               "rate": rng.choice(levels, rows)})
        found.append(_case(f"flag 'yes' on {share:.1%} of {rows} rows (reference 0.5%)",
                           compute_drift(window, flag_reference, watch), share > 0.005))
    float32 = pd.DataFrame({"flag": rng.choice(["no", "yes"], 1000, p=[0.995, 0.005]),
                            "rate": rng.choice(levels, 1000).astype(np.float32)})
    found.append(_case("same distribution, the rate column stored as float32",
                       compute_drift(float32, flag_reference, watch), False))
    days = pd.concat([generate_day(d, 1000, seed, False, d * 1000) for d in range(5)], ignore_index=True)
    demo_reference = compute_reference_stats(
        days, infer_schema(days, label="label", key="customer_id", features=[], categorical=[]))
    for day in (10, 11, 12):
        for drifted in (False, True):
            window = generate_day(day, 1000, seed, drifted, day * 1000)
            found.append(_case(f"demo day {day}, {'drifted' if drifted else 'undrifted'}",
                               compute_drift(window, demo_reference, watch), drifted))
    return found
