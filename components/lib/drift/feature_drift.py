"""Drift of the newest data against the champion's reference statistics, with scipy and numpy only.

Every test has an effect size, judged against its threshold (config ``watch``, per column overrides in
``watch.column_thresholds``), and a p-value under "same distribution as the reference"; a column drifts
only when both say so (effect above the threshold, p < ``watch.max_p_value``), so that a small window's
sampling noise does not pass an effect-size threshold:

* numeric columns: PSI over the reference deciles and the two-sample Kolmogorov-Smirnov statistic D;
  and the share of rows beyond one end of the reference sample's range (``out_of_range``: rows unlike any
  reference row, which PSI and KS miss at a few percent; its p-value is the exact exceedance test);
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
validation writes (``reference_stats.json``). The tests every kind of column shares (PSI, its bound, rare
merging, the null fraction) and the verdict live in column_drift.py; a text's shares judged jointly in
profile_drift.py.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import special, stats

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.data.concat import conform
from ctpipe.components.lib.data.stream_stats import category_counts, category_key
from ctpipe.components.lib.drift.column_drift import (
    MIN_EXPECTED_COUNT,
    RARE_CATEGORY,
    ColumnDrift,
    column_verdict,
    merge_rare_categories,
    null_fraction_test,
    psi,
    psi_p_value,
)
from ctpipe.components.lib.drift.histogram_drift import histogram_drift
from ctpipe.components.lib.drift.profile_drift import profile_drift, profile_groups

NUMERIC_TESTS = ("psi", "ks", "null_fraction")
CATEGORICAL_TESTS = ("psi", "cramers_v", "unseen_share", "null_fraction")
NULL_CATEGORY = "<null>"
OTHER_CATEGORY = "<unseen>"


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


def _numeric_values(series: pd.Series) -> tuple[np.ndarray, int]:
    if pd.api.types.is_float_dtype(series) and series.dtype.itemsize < 8:
        # A float32 export: 0.1 would read as 0.10000000149, above the reference's tied edges and sample values
        # (a false shift of every such row); widened through its shortest text, as partitions are (concat.py).
        series = conform(series, np.dtype("float64"))
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


def exceedance_p_value(k: int, n: int, m: int) -> float:
    """P(at least ``k`` of ``n`` window values lie above all ``m`` reference values) when all n + m are exchangeable
    draws of one continuous distribution: the top k of the pooled n + m are all window values, C(n, k) / C(n + m, k)
    (Rosenbaum's exceedance test; ties at the reference's end are not counted, which only makes it conservative)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return float(np.exp(special.gammaln(n + 1) - special.gammaln(n - k + 1) - special.gammaln(n + m + 1)
                        + special.gammaln(n + m - k + 1)))


def out_of_range_test(sorted_sample: np.ndarray, sorted_current: np.ndarray) -> dict[str, float]:
    """The share of window values beyond one end of the reference sample's range (the larger end's share), and its
    p-value: both ends' exceedance tests, Bonferroni over the two. A uniform sample of the reference is exchangeable
    with the window under "same distribution", so its range serves as well as the whole reference's."""
    n, m = len(sorted_current), len(sorted_sample)
    below = int(np.searchsorted(sorted_current, sorted_sample[0], side="left"))
    above = n - int(np.searchsorted(sorted_current, sorted_sample[-1], side="right"))
    k = max(below, above)
    return {"value": k / n, "p_value": min(1.0, 2 * exceedance_p_value(k, n, m)), "below": below, "above": above}


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
            tests["out_of_range"] = out_of_range_test(sample, values)
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
    # Both sides by category_key: 17 and 17.0 (an integer column that a null made float) are one category.
    ref_counts: dict[str, float] = {}
    for k, v in (reference.get("frequencies") or {}).items():
        ref_counts[category_key(str(k))] = ref_counts.get(category_key(str(k)), 0.0) + float(v)
    non_null = series.dropna()
    nulls = len(series) - len(non_null)
    current = category_counts(non_null)
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
        exact = len(buckets) == 1 and len(buckets[0]) >= 2
        if exact:
            # Every category but the commonest is expected < 5 times in the window, so the merge left one
            # bucket and nothing to compare: the commonest against the rest, with Fisher's exact test (window
            # vs reference counts) as the p-value, since the chi-square rule cannot be met.
            top = max(buckets[0], key=lambda c: (shares[c], c))
            buckets = [[top], [c for c in buckets[0] if c != top]]
        expected = np.array([sum(shares[c] for c in b) for b in buckets])
        observed = np.array([float(sum(current.get(c, 0) for c in b)) for b in buckets])
        if n_seen > 0 and len(buckets) >= 2:
            value = psi(expected, observed / n_seen)
            chi2 = float(np.sum((observed - expected * n_seen) ** 2 / (expected * n_seen)))
            if exact:
                rest = round(sum(ref_counts[c] for c in buckets[1]))
                table = [[int(observed[1]), int(observed[0])], [rest, round(m - rest)]]
                psi_p = chi2_p = float(stats.fisher_exact(table).pvalue)
            else:
                psi_p = psi_p_value(value, n_seen, m, len(buckets))
                chi2_p = float(stats.chi2.sf(chi2 * m / (n_seen + m), len(buckets) - 1))
            tests["psi"] = {"value": value, "p_value": psi_p}
            tests["cramers_v"] = {"value": math.sqrt(chi2 / (n_seen * (len(buckets) - 1))), "p_value": chi2_p}
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
    profile_shares: Collection[str] = (),
) -> DriftReport:
    """Compare every reference column with the current rows; a missing column counts as drifted.

    ``histograms``: the window's per-row counts of the reference's ``distributions`` (``Task.drift_histograms``).
    ``profile_shares``: the names of the share columns one text's profile is judged jointly over
    (``profile_drift.py``; the caller takes them from the task, e.g. ``causal_lm``'s ``SHARE_NAMES``).
    """
    columns: dict[str, ColumnDrift] = {}
    for kind, compare in (("numeric", numeric_drift), ("categorical", categorical_drift)):
        for column, ref in (reference.get(kind) or {}).items():
            if column not in current.columns:
                columns[column] = ColumnDrift(
                    column, "missing", 0, 1.0, float(ref.get("null_fraction", 0.0)), {}, "missing", 1.0, 0.0, True
                )
                continue
            columns[column] = compare(column, current[column], ref, watch, reference_rows=int(reference.get("rows", 0)))
    numeric = reference.get("numeric") or {}
    for profile, names in profile_groups(numeric, current.columns, profile_shares).items():
        columns[profile] = profile_drift(profile, names, current, numeric, watch)
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
