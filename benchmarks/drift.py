"""Drift benchmark: ``compute_drift`` on 1,000,000 current rows x 20 columns against a reference.

    python benchmarks/drift.py [--rows 1000000] [--repeats 3]

The columns: 14 numeric (normal, lognormal, Poisson, uniform, with 1% NaN in some) and 6 categorical
(5 to 50 categories), the current rows shifted in half of them. The reference statistics are computed
from 200,000 rows in the documented reference_stats.json format. Only the drift computation is timed
(PSI + KS for numeric, PSI + chi-square for categorical); the data is in memory. The last line printed
is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.data.reference_stats import compute_reference_stats
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.drift.feature_drift import compute_drift

N_NUMERIC, N_CATEGORICAL = 14, 6


def make_frame(rows: int, seed: int, shifted: bool) -> pd.DataFrame:
    """A frame of 20 feature columns; with ``shifted`` every other column moves."""
    rng = np.random.default_rng(seed)
    columns: dict[str, np.ndarray] = {}
    for i in range(N_NUMERIC):
        shift = 0.3 if shifted and i % 2 == 0 else 0.0
        kind = i % 4
        if kind == 0:
            values = rng.normal(shift, 1.0, rows)
        elif kind == 1:
            values = rng.lognormal(1.0 + shift, 0.5, rows)
        elif kind == 2:
            values = rng.poisson(5 + 5 * shift, rows).astype("float64")
        else:
            values = rng.uniform(shift, 1.0 + shift, rows)
        if i % 3 == 0:
            values[rng.random(rows) < 0.01] = np.nan
        columns[f"num_{i}"] = values
    for j in range(N_CATEGORICAL):
        k = [5, 10, 20, 50, 3, 8][j]
        p = np.arange(1, k + 1, dtype="float64")
        if shifted and j % 2 == 0:
            p = p[::-1]
        columns[f"cat_{j}"] = rng.choice([f"c{c}" for c in range(k)], rows, p=p / p.sum())
    return pd.DataFrame(columns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--reference-rows", type=int, default=200_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    reference_frame = make_frame(args.reference_rows, 0, shifted=False)
    schema = Schema(
        label="label",
        key=None,
        numeric=[f"num_{i}" for i in range(N_NUMERIC)],
        categorical=[f"cat_{j}" for j in range(N_CATEGORICAL)],
        classes=[],
    )
    reference = compute_reference_stats(reference_frame, schema)
    current = make_frame(args.rows, 1, shifted=True)
    watch = WatchConfig()
    times, report = [], None
    for _ in range(args.repeats):
        start = time.perf_counter()
        report = compute_drift(current, reference, watch)
        times.append(time.perf_counter() - start)
    result = {
        "benchmark": "drift",
        "rows": args.rows,
        "columns": N_NUMERIC + N_CATEGORICAL,
        "reference_rows": args.reference_rows,
        "seconds_median": round(statistics.median(times), 3),
        "seconds_all": [round(t, 3) for t in times],
        "drifted_columns": len(report.drifted_columns),
        "rows_per_second": round(args.rows / statistics.median(times)),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
