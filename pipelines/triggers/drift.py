"""Drift of the newest data against the champion's reference statistics, with scipy and numpy only.

Every test has an effect size, judged against its threshold (config ``watch``, per column overrides in
``watch.column_thresholds``), and a p-value under "same distribution as the reference"; a column drifts
only when both say so (effect above the threshold, p < ``watch.max_p_value``), so that a small window's
sampling noise does not pass an effect-size threshold:

* numeric columns: PSI over the reference deciles and the two-sample Kolmogorov-Smirnov statistic D;
* categorical columns: PSI and the chi-square test (as Cramer's V) over the reference's categories,
  where categories expected fewer than 5 times in the window are merged into one bucket (the
  chi-square rule), and the share of rows whose category the reference never saw, on its own;
* distribution columns (a histogram summed over documents, e.g. ``text__byte_unigram``: the 256 byte
  values of a text): PSI over merged bins with a p-value from a bootstrap over documents
  (``histogram_drift.py``, which says why not over bytes);
* every column: the fraction of nulls, on its own (values are compared without their nulls).

PSI's p-value: for two samples of n and m rows from one distribution over k bins, PSI * n*m/(n+m) is
approximately chi-square with k - 1 degrees of freedom (a first-order expansion of the log; Yurdakul
2018), so its sampling-noise bound at level alpha is (1/n + 1/m) * chi2_{k-1}(1 - alpha). The chi-square
statistic is scaled the same way, since the reference is a sample too. The reference format is the one
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
NUMERIC_TESTS = ("psi", "ks", "null_fraction")
CATEGORICAL_TESTS = ("psi", "cramers_v", "unseen_share", "null_fraction")
NULL_CATEGORY = "<null>"
OTHER_CATEGORY = "<unseen>"
RARE_CATEGORY = "<rare>"
# The chi-square rule: a bucket expected fewer times than this in the window is merged with others.
MIN_EXPECTED_COUNT = 5


@dataclass
class ColumnDrift:
    """The drift tests of one column and the verdict."""

    column: str
    kind: str  # numeric | categorical | distribution | missing
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
    return {
        "psi": watch.psi_threshold,
        "ks": watch.ks_threshold,
        "cramers_v": watch.cramers_v_threshold,
        "unseen_share": watch.unseen_share_threshold,
        "null_fraction": watch.null_fraction_threshold,
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


def numeric_drift(
    column: str, series: pd.Series, reference: dict[str, Any], watch: WatchConfig, *, reference_rows: int = 0
) -> ColumnDrift:
    """PSI over the reference deciles, KS against the reference sample and the null fraction of one numeric column."""
    values, nulls = _numeric_values(series)
    values.sort()  # one sort serves the bins, KS and the quantile fallback
    quantiles = np.asarray(reference.get("quantiles") or [], dtype="float64")
    sample = np.asarray(reference.get("sample") or [], dtype="float64")
    sample = np.sort(sample[np.isfinite(sample)])
    # Deciles, or fewer bins when the window is too small to expect MIN_EXPECTED_COUNT rows in each.
    k = min(10, max(2, len(values) // MIN_EXPECTED_COUNT))
    cuts = quantiles[np.round(np.linspace(0, len(quantiles) - 1, k + 1)).astype(int)] if len(quantiles) else np.array([])
    inner = np.unique(cuts[1:-1]) if len(cuts) > 2 else np.array([])
    reference_non_null = round(reference_rows * (1 - float(reference.get("null_fraction", 0.0))))
    if len(sample):
        expected = _bin_fractions(sample, inner)
        expected_rows = len(sample)
    else:
        # Without a sample the deciles themselves say ~10% of the reference falls in each bin.
        expected = np.full(len(inner) + 1, 1.0 / (len(inner) + 1))
        expected_rows = reference_non_null
    actual = _bin_fractions(values, inner)
    tests: dict[str, dict[str, float | bool | None]] = {}
    if len(values):
        value = psi(expected, actual)
        tests["psi"] = {"value": value, "p_value": psi_p_value(value, len(values), expected_rows, len(inner) + 1)}
        if len(sample):
            d, p_value = ks_two_sample(sample, values)
            tests["ks"] = {"value": d, "p_value": p_value}
        elif len(quantiles):
            # Largest gap between the reference CDF at its percentiles and the current CDF there.
            current_cdf = np.searchsorted(values, quantiles, side="right") / len(values)
            tests["ks"] = {"value": float(np.max(np.abs(current_cdf - np.linspace(0, 1, len(quantiles))))), "p_value": None}
    tests["null_fraction"] = null_fraction_test(nulls, len(series), float(reference.get("null_fraction", 0.0)), reference_rows)
    labels = _edge_labels(inner)
    return column_verdict(
        column, "numeric", len(series), nulls, reference, tests, watch, labels, expected.tolist(), actual.tolist()
    )


def categorical_drift(
    column: str, series: pd.Series, reference: dict[str, Any], watch: WatchConfig, *, reference_rows: int = 0
) -> ColumnDrift:
    """PSI and chi-square over merged reference categories, the unseen-category share and the null fraction."""
    ref_counts = {str(k): float(v) for k, v in (reference.get("frequencies") or {}).items()}
    non_null = series.dropna()
    nulls = len(series) - len(non_null)
    current = non_null.astype(str).value_counts()
    seen = current.index.isin(list(ref_counts))
    unseen = int(current[~seen].sum())
    n_seen, n = int(current[seen].sum()), len(non_null)
    m = int(sum(ref_counts.values()))
    tests: dict[str, dict[str, float | bool | None]] = {}
    bins: list[str] = []
    ref_fracs: list[float] = []
    cur_fracs: list[float] = []
    if m > 0:
        shares = {c: v / m for c, v in ref_counts.items()}
        buckets = merge_rare_categories(shares, max(n_seen, 1))
        expected = np.array([sum(shares[c] for c in b) for b in buckets])
        observed = np.array([float(sum(current.get(c, 0) for c in b)) for b in buckets])
        if n_seen > 0 and len(buckets) >= 2:
            value = psi(expected, observed / n_seen)
            tests["psi"] = {"value": value, "p_value": psi_p_value(value, n_seen, m, len(buckets))}
            chi2 = float(np.sum((observed - expected * n_seen) ** 2 / (expected * n_seen)))
            p_value = float(stats.chi2.sf(chi2 * m / (n_seen + m), len(buckets) - 1))
            tests["cramers_v"] = {"value": math.sqrt(chi2 / (n_seen * (len(buckets) - 1))), "p_value": p_value}
        if n > 0:
            # Under "same distribution", a new row's category is unseen with about the reference's share of
            # categories seen once (Good-Turing), at least one in m.
            singletons = sum(1 for v in ref_counts.values() if v == 1)
            p_new = max(singletons, 1) / m
            tests["unseen_share"] = {"value": unseen / n, "p_value": float(stats.binom.sf(unseen - 1, n, p_new))}
        bins = [b[0] if len(b) == 1 else f"{RARE_CATEGORY} ({len(b)})" for b in buckets] + [OTHER_CATEGORY]
        ref_fracs = expected.tolist() + [0.0]
        cur_fracs = (observed / n).tolist() + [unseen / n] if n else []
        if not n:
            bins, ref_fracs = [], []
    tests["null_fraction"] = null_fraction_test(nulls, len(series), float(reference.get("null_fraction", 0.0)), reference_rows)
    return column_verdict(column, "categorical", len(series), nulls, reference, tests, watch, bins, ref_fracs, cur_fracs)


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
    histograms: dict[str, pd.DataFrame] | None = None,
) -> DriftReport:
    """Compare every reference column with the current rows; a missing column counts as drifted.

    ``histograms``: the window's per-row counts of the reference's ``distributions`` (``Task.drift_histograms``).
    """
    # histogram_drift builds on this module's tests and verdict, so it is imported here, not at the top.
    from pipelines.triggers.histogram_drift import histogram_drift

    columns: dict[str, ColumnDrift] = {}
    for kind, compare in (("numeric", numeric_drift), ("categorical", categorical_drift)):
        for column, ref in (reference.get(kind) or {}).items():
            if column not in current.columns:
                columns[column] = ColumnDrift(
                    column, "missing", 0, 1.0, float(ref.get("null_fraction", 0.0)), {}, "missing", 1.0, 0.0, True
                )
                continue
            columns[column] = compare(column, current[column], ref, watch, reference_rows=int(reference.get("rows", 0)))
    for column, ref in (reference.get("distributions") or {}).items():
        if column in (histograms or {}):
            columns[column] = histogram_drift(column, histograms[column], ref, watch)
        else:
            columns[column] = ColumnDrift(
                column, "missing", 0, 1.0, float(ref.get("null_fraction", 0.0)), {}, "missing", 1.0, 0.0, True
            )
    return DriftReport(
        rows=len(current),
        reference_rows=int(reference.get("rows", 0)),
        columns=columns,
        min_drifted_columns=watch.min_drifted_columns,
        window=list(window or []),
        champion_version=champion_version,
    )
