"""One column's drift: the ColumnDrift record, the tests every kind of column shares and the verdict.

PSI and its sampling-noise bound, the merging of rare bins (the chi-square rule), the null-fraction test,
the thresholds of config ``watch`` with per-column overrides, and the verdict: a test drifts when its
effect passes its threshold and its p-value is below ``watch.max_p_value``. feature_drift.py (numeric and
categorical columns) and histogram_drift.py (distributions over documents) build on them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from ctpipe.components.lib.config import WatchConfig

# Bins with no rows would make PSI infinite; a small floor keeps it finite and comparable.
PSI_FLOOR = 1e-4
RARE_CATEGORY = "<rare>"
# The chi-square rule: a bucket expected fewer times than this in the window is merged with others.
MIN_EXPECTED_COUNT = 5

@dataclass
class ColumnDrift:
    """The drift tests of one column and the verdict."""

    column: str
    kind: str  # numeric | categorical | distribution | profile (profile_drift.py) | missing
    rows: int
    null_fraction: float
    reference_null_fraction: float
    tests: dict[str, dict[str, float | bool | None]]
    statistic: str
    value: float
    threshold: float
    drifted: bool
    # For the figure: bin labels with the reference and current fractions.
    bins: list[str] = field(default_factory=list)
    reference_fractions: list[float] = field(default_factory=list)
    current_fractions: list[float] = field(default_factory=list)

    def brief(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "value": self.value, "threshold": self.threshold, "drifted": self.drifted}

    def to_dict(self) -> dict[str, Any]:
        return {
            "column": self.column,
            "kind": self.kind,
            "rows": self.rows,
            "null_fraction": self.null_fraction,
            "reference_null_fraction": self.reference_null_fraction,
            "tests": self.tests,
            **self.brief(),
            "bins": self.bins,
            "reference_fractions": self.reference_fractions,
            "current_fractions": self.current_fractions,
        }


def psi(expected: np.ndarray, actual: np.ndarray) -> float:
    """Population stability index between two distributions over the same bins (fractions)."""
    e = np.clip(np.asarray(expected, dtype="float64"), PSI_FLOOR, None)
    a = np.clip(np.asarray(actual, dtype="float64"), PSI_FLOOR, None)
    e, a = e / e.sum(), a / a.sum()
    return float(np.sum((a - e) * np.log(a / e)))


def threshold_for(watch: WatchConfig, column: str, test: str) -> float:
    """The threshold of ``test`` for ``column``: the column's override, else the default."""
    override = watch.column_thresholds.get(column, {})
    if test in override:
        return float(override[test])
    return {
        "psi": watch.psi_threshold,
        "ks": watch.ks_threshold,
        "cramers_v": watch.cramers_v_threshold,
        "unseen_share": watch.unseen_share_threshold,
        "null_fraction": watch.null_fraction_threshold,
        "out_of_range": watch.out_of_range_threshold,
        "mahalanobis": watch.profile_distance_threshold,
    }[test]


def two_sample_scale(n: int, m: int) -> float:
    """n*m/(n+m): turns a divergence between two samples' fractions into a chi-square statistic."""
    return n * m / (n + m) if n > 0 and m > 0 else 0.0


def psi_p_value(value: float, n: int, m: int, bins: int) -> float:
    """P(PSI >= value) when a window of n rows and a reference of m rows share one distribution over ``bins``."""
    if bins < 2 or n == 0 or m == 0:
        return 1.0
    return float(stats.chi2.sf(value * two_sample_scale(n, m), bins - 1))


def null_fraction_test(nulls: int, rows: int, reference_fraction: float, reference_rows: int) -> dict[str, Any]:
    """Change of the null fraction, with the two-proportion z-test's p-value (two-sided)."""
    current = nulls / rows if rows else 0.0
    change = abs(current - reference_fraction)
    pooled = (nulls + reference_fraction * reference_rows) / (rows + reference_rows) if rows + reference_rows else 0.0
    spread = math.sqrt(pooled * (1 - pooled) * (1 / max(rows, 1) + 1 / max(reference_rows, 1)))
    p_value = float(2 * stats.norm.sf(change / spread)) if spread > 0 else (1.0 if change == 0 else 0.0)
    return {"value": change, "p_value": p_value}


def merge_rare_categories(reference_shares: dict[str, float], n: int) -> list[list[str]]:
    """Buckets of reference categories, each expected at least MIN_EXPECTED_COUNT times in n rows.

    Frequent categories keep a bucket of their own; the rest share one bucket, which takes the next
    least frequent category until it too is expected often enough.
    """
    ordered = sorted(reference_shares, key=lambda c: (-reference_shares[c], c))
    keep = [c for c in ordered if reference_shares[c] * n >= MIN_EXPECTED_COUNT]
    rare = [c for c in ordered if c not in keep]
    while rare and keep and sum(reference_shares[c] for c in rare) * n < MIN_EXPECTED_COUNT:
        rare.insert(0, keep.pop())
    return [[c] for c in keep] + ([rare] if rare else [])


def column_verdict(
    column: str,
    kind: str,
    rows: int,
    nulls: int,
    reference: dict[str, Any],
    tests: dict[str, dict[str, float | bool | None]],
    watch: WatchConfig,
    bins: list[str],
    reference_fractions: list[float],
    current_fractions: list[float],
) -> ColumnDrift:
    scored = []
    for name, test in tests.items():
        limit = threshold_for(watch, column, name)
        # A zero threshold switches the test off for this column; a p-value must also be significant.
        significant = test.get("p_value") is None or float(test["p_value"]) < watch.max_p_value
        drifted = bool(limit > 0 and float(test["value"]) > limit and significant)
        test.update(threshold=limit, drifted=drifted)
        scored.append((drifted, float(test["value"]) / limit if limit > 0 else -1.0, name))
    null_fraction = nulls / rows if rows else 0.0
    reference_null = float(reference.get("null_fraction", 0.0))
    if not scored:
        return ColumnDrift(column, kind, rows, null_fraction, reference_null, tests, "none", 0.0, 0.0, False)
    # The column is summarised by its most decisive test: a drifted one first, then the largest ratio.
    chosen_name = max(scored)[2]
    chosen = tests[chosen_name]
    return ColumnDrift(
        column=column,
        kind=kind,
        rows=rows,
        null_fraction=null_fraction,
        reference_null_fraction=reference_null,
        tests=tests,
        statistic=chosen_name,
        value=float(chosen["value"]),
        threshold=float(chosen["threshold"]),
        drifted=bool(chosen["drifted"]),
        bins=bins,
        reference_fractions=[float(x) for x in reference_fractions],
        current_fractions=[float(x) for x in current_fractions],
    )
