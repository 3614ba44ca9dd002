"""Drift of the newest data against the champion's reference statistics, with scipy and numpy only.

Numeric columns: PSI over the reference deciles and the two-sample Kolmogorov-Smirnov statistic D
against the reference sample. Categorical columns: PSI over the categories and the chi-square test,
judged by Cramer's V (the chi-square statistic scaled by the row count), because with thousands of
rows any p-value is tiny; the p-values are reported beside the effect sizes. A statistic above its
threshold (config ``watch``, per column overrides in ``watch.column_thresholds``) marks the column as
drifted, if the test is also significant (p < ``watch.max_p_value``) where it has a p-value, so that the
noise of a small window does not pass an effect-size threshold. The reference format is the one
validation writes (``reference_stats.json``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from components.config import WatchConfig

# Bins with no rows would make PSI infinite; a small floor keeps it finite and comparable.
_EPSILON = 1e-4
NUMERIC_TESTS = ("psi", "ks")
CATEGORICAL_TESTS = ("psi", "cramers_v")
NULL_CATEGORY = "<null>"
OTHER_CATEGORY = "<unseen>"


@dataclass
class ColumnDrift:
    """The drift tests of one column and the verdict."""

    column: str
    kind: str  # numeric | categorical | missing
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


@dataclass
class DriftReport:
    """Per-column drift of a window of partitions against the reference statistics."""

    rows: int
    reference_rows: int
    columns: dict[str, ColumnDrift]
    min_drifted_columns: int
    window: list[str] = field(default_factory=list)
    champion_version: str | None = None

    @property
    def drifted_columns(self) -> list[str]:
        return [name for name, col in self.columns.items() if col.drifted]

    @property
    def drifted(self) -> bool:
        return len(self.drifted_columns) >= self.min_drifted_columns

    def brief(self) -> dict[str, dict[str, Any]]:
        """Per column: statistic, value, threshold, drifted (the watcher's JSON line)."""
        return {name: col.brief() for name, col in self.columns.items()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "drifted": self.drifted,
            "drifted_columns": self.drifted_columns,
            "min_drifted_columns": self.min_drifted_columns,
            "rows": self.rows,
            "reference_rows": self.reference_rows,
            "window": self.window,
            "champion_version": self.champion_version,
            "columns": {name: col.to_dict() for name, col in self.columns.items()},
        }


def psi(expected: np.ndarray, actual: np.ndarray) -> float:
    """Population stability index between two distributions over the same bins (fractions)."""
    e = np.clip(np.asarray(expected, dtype="float64"), _EPSILON, None)
    a = np.clip(np.asarray(actual, dtype="float64"), _EPSILON, None)
    e, a = e / e.sum(), a / a.sum()
    return float(np.sum((a - e) * np.log(a / e)))


def threshold_for(watch: WatchConfig, column: str, test: str) -> float:
    """The threshold of ``test`` for ``column``: the column's override, else the default."""
    override = watch.column_thresholds.get(column, {})
    if test in override:
        return float(override[test])
    return {"psi": watch.psi_threshold, "ks": watch.ks_threshold, "cramers_v": watch.cramers_v_threshold}[test]


def _numeric_values(series: pd.Series) -> tuple[np.ndarray, int]:
    values = pd.to_numeric(series, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    finite = values[np.isfinite(values)]
    return finite, len(values) - len(finite)


def _bin_fractions(sorted_values: np.ndarray, inner_edges: np.ndarray) -> np.ndarray:
    """Fractions of ``sorted_values`` in the bins (-inf, e1], (e1, e2], ..., (ek, inf)."""
    cuts = np.searchsorted(sorted_values, inner_edges, side="right")
    counts = np.diff(np.concatenate(([0], cuts, [len(sorted_values)])))
    return counts / max(1, len(sorted_values))


def ks_two_sample(sorted_reference: np.ndarray, sorted_current: np.ndarray) -> tuple[float, float]:
    """Two-sample KS statistic D and its asymptotic p-value, in O(m log n) for a small reference sample.

    Between two reference points the reference CDF is flat while the current one rises, so the largest
    gap is reached at a reference point or just before it: evaluating both CDFs there (left and right
    limits) gives exactly scipy's D without the n + m searchsorted of ``ks_2samp``.
    """
    m, n = len(sorted_reference), len(sorted_current)
    ref_right = np.searchsorted(sorted_reference, sorted_reference, side="right") / m
    ref_left = np.searchsorted(sorted_reference, sorted_reference, side="left") / m
    cur_right = np.searchsorted(sorted_current, sorted_reference, side="right") / n
    cur_left = np.searchsorted(sorted_current, sorted_reference, side="left") / n
    d = float(max(np.max(np.abs(ref_right - cur_right)), np.max(np.abs(ref_left - cur_left))))
    effective_n = round(m * n / (m + n))
    return d, float(np.clip(stats.kstwo.sf(d, max(1, effective_n)), 0.0, 1.0))


def numeric_drift(column: str, series: pd.Series, reference: dict[str, Any], watch: WatchConfig) -> ColumnDrift:
    """PSI over the reference deciles and KS against the reference sample for one numeric column."""
    values, nulls = _numeric_values(series)
    values.sort()  # one sort serves the bins, KS and the quantile fallback
    quantiles = np.asarray(reference.get("quantiles") or [], dtype="float64")
    sample = np.asarray(reference.get("sample") or [], dtype="float64")
    sample = np.sort(sample[np.isfinite(sample)])
    deciles = quantiles[:: max(1, (len(quantiles) - 1) // 10)] if len(quantiles) else np.array([])
    inner = np.unique(deciles[1:-1]) if len(deciles) > 2 else np.array([])
    if len(sample):
        expected = _bin_fractions(sample, inner)
    else:
        # Without a sample the deciles themselves say ~10% of the reference falls in each bin.
        expected = np.full(len(inner) + 1, 1.0 / (len(inner) + 1))
    actual = _bin_fractions(values, inner)
    tests: dict[str, dict[str, float | bool | None]] = {}
    if len(values):
        tests["psi"] = {"value": psi(expected, actual), "p_value": None}
        if len(sample):
            d, p_value = ks_two_sample(sample, values)
            tests["ks"] = {"value": d, "p_value": p_value}
        elif len(quantiles):
            # Largest gap between the reference CDF at its percentiles and the current CDF there.
            current_cdf = np.searchsorted(values, quantiles, side="right") / len(values)
            tests["ks"] = {"value": float(np.max(np.abs(current_cdf - np.linspace(0, 1, len(quantiles))))), "p_value": None}
    labels = _edge_labels(inner)
    return _verdict(
        column, "numeric", len(series), nulls, reference, tests, watch, labels, expected.tolist(), actual.tolist()
    )


def categorical_drift(column: str, series: pd.Series, reference: dict[str, Any], watch: WatchConfig) -> ColumnDrift:
    """PSI and the chi-square test (as Cramer's V) over the categories of one categorical column."""
    ref_counts = {str(k): float(v) for k, v in (reference.get("frequencies") or {}).items()}
    non_null = series.dropna()
    nulls = len(series) - len(non_null)
    current = non_null.astype(str).value_counts()
    categories = sorted(ref_counts)
    unseen = float(current[~current.index.isin(categories)].sum())
    observed = np.array([float(current.get(c, 0.0)) for c in categories] + [unseen])
    reference_counts = np.array([ref_counts[c] for c in categories] + [0.0])
    tests: dict[str, dict[str, float | bool | None]] = {}
    n = observed.sum()
    if n > 0 and reference_counts.sum() > 0:
        expected_fraction = reference_counts / reference_counts.sum()
        tests["psi"] = {"value": psi(expected_fraction, observed / n), "p_value": None}
        # Add-half smoothing so a category the reference never saw does not divide by zero.
        smoothed = (reference_counts + 0.5) / (reference_counts.sum() + 0.5 * len(reference_counts))
        chi2, p_value = stats.chisquare(observed, smoothed * n)
        k = max(2, len(reference_counts))
        tests["cramers_v"] = {"value": float(math.sqrt(chi2 / (n * (k - 1)))), "p_value": float(p_value)}
        ref_fracs = expected_fraction.tolist()
        cur_fracs = (observed / n).tolist()
    else:
        ref_fracs, cur_fracs = [], []
    return _verdict(
        column, "categorical", len(series), nulls, reference, tests, watch, categories + [OTHER_CATEGORY], ref_fracs, cur_fracs
    )


def _verdict(
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


def _edge_labels(inner: np.ndarray) -> list[str]:
    edges = [f"{e:.4g}" for e in inner]
    if not edges:
        return ["all"]
    return [f"<= {edges[0]}"] + [f"{a}..{b}" for a, b in zip(edges, edges[1:], strict=False)] + [f"> {edges[-1]}"]


def compute_drift(
    current: pd.DataFrame,
    reference: dict[str, Any],
    watch: WatchConfig,
    *,
    window: list[str] | None = None,
    champion_version: str | None = None,
) -> DriftReport:
    """Compare every reference column with the current rows; a missing column counts as drifted."""
    columns: dict[str, ColumnDrift] = {}
    for kind, compare in (("numeric", numeric_drift), ("categorical", categorical_drift)):
        for column, ref in (reference.get(kind) or {}).items():
            if column not in current.columns:
                columns[column] = ColumnDrift(
                    column, "missing", 0, 1.0, float(ref.get("null_fraction", 0.0)), {}, "missing", 1.0, 0.0, True
                )
                continue
            columns[column] = compare(column, current[column], ref, watch)
    return DriftReport(
        rows=len(current),
        reference_rows=int(reference.get("rows", 0)),
        columns=columns,
        min_drifted_columns=watch.min_drifted_columns,
        window=list(window or []),
        champion_version=champion_version,
    )
