"""Drift of a corpus-level histogram (e.g. a text column's 256 byte values) against the reference's counts.

The reference holds the train split's counts per bin summed over its documents, their number, and the
sum of each document's counts times themselves (``reference_stats.json`` ``distributions``); the window
gives each document's counts (``Task.drift_histograms``). The effect size is PSI between the two summed
histograms over bins merged as categories are (column_drift.py), with DOCUMENTS as the sample size: a
bucket is expected in at least 5 of the window's documents' worth of bytes, the rest share one bucket
(where bytes the reference never saw land too). Its threshold is ``watch.psi_threshold`` or
``watch.column_thresholds.<column>.psi``; it drifts only when also significant (``watch.max_p_value``).

The p-value counts documents, not bytes, as the independent draws. The bytes of one document are not
independent (a document about ``lambda`` repeats its letters, an ASCII table its dashes), so the
multinomial bound (column_drift.psi_p_value) with n = bytes is far too narrow: new help-topic documents
of the demo get p ~ 1e-159 there. With n = documents that bound would be valid but loose: PSI 0.21 for
the demo's 415 documents over 20 buckets, where the module docstrings reach 0.059. So the histogram's
fractions get the variance that a bootstrap over documents would show, computed exactly instead of
resampled (the delta method for a ratio of sums: fractions p = sum(c_i) / L over documents with counts
c_i and L bytes in all have Cov(p) = (I - p 1^T) sum(c_i c_i^T) (I - 1 p^T) / L^2), from both sides'
documents pooled, as under "same distribution" they come from one population (a bootstrap of the window
alone misses odd documents that sit in the reference). PSI is to first order the quadratic form sum_b
(a_b - e_b)^2 / e_b of the difference of the fractions; its mean and variance under that covariance fit a
scaled chi-square a * chi2(nu) (Satterthwaite), whose tail is the p-value; ``noise_bound`` is the PSI
reaching ``watch.max_p_value``. With one byte per document it is column_drift.psi_p_value's bound.

Known limit: the tail is a normal approximation, too thin when a handful of documents hold most of a
bin (the demo's ASCII tables hold most of its dashes): with the effect threshold off, 3 of 400 random
halves of the demo corpus get p < 0.001. The PSI threshold keeps them out (their PSI is at most 0.055).
Buckets merged on the window's bytes (~100 buckets) or on each byte's effective draws did worse (6 and 5
of 400), so the merge counts documents: coarser for small windows (12 buckets at 200 documents).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.drift.column_drift import (
    PSI_FLOOR,
    RARE_CATEGORY,
    ColumnDrift,
    column_verdict,
    merge_rare_categories,
    null_fraction_test,
    psi,
)

# The figure shows the buckets whose fractions differ most (a byte histogram has ~100 buckets).
FIGURE_BUCKETS = 30


def fraction_covariance(counts: np.ndarray, outer: np.ndarray, documents: int) -> np.ndarray:
    """Covariance of a histogram's fractions sum(c_i) / L under resampling its ``documents`` (delta method),
    from the summed ``counts`` and ``outer`` = sum(c_i c_i^T); n / (n - 1) makes it unbiased."""
    total = counts.sum()
    if documents < 2 or total <= 0:
        return np.zeros_like(outer)
    p = counts / total
    centre = np.eye(len(p)) - np.outer(p, np.ones(len(p)))
    return centre @ outer @ centre.T / total**2 * documents / (documents - 1)


def psi_noise(value: float, expected: np.ndarray, covariance: np.ndarray, alpha: float) -> tuple[float, float]:
    """P(PSI >= value) when window and reference share one distribution, with the difference of their
    fractions ~ N(0, ``covariance``), and the PSI reached at level ``alpha`` (a * chi2(nu), Satterthwaite)."""
    weighted = covariance / np.clip(expected, PSI_FLOOR, None)[:, None]
    mean, var = float(np.trace(weighted)), float(2 * np.sum(weighted * weighted.T))
    if not (mean > 0 and var > 0):
        return (1.0 if value <= 0 else 0.0), 0.0
    scale, dof = var / (2 * mean), 2 * mean**2 / var
    return float(stats.chi2.sf(value / scale, dof)), float(scale * stats.chi2.isf(alpha, dof))


def histogram_drift(column: str, per_row: pd.DataFrame, reference: dict[str, Any], watch: WatchConfig) -> ColumnDrift:
    """PSI of the window's summed histogram against the reference's, with a p-value that counts documents
    as the draws, and the share of rows without a value (null fraction) of one histogram column."""
    labels = [str(c) for c in reference.get("labels") or []]
    if [str(c) for c in per_row.columns] != labels:
        raise ValueError(f"drift histogram '{column}': the window's bins ({per_row.shape[1]}, first "
                         f"{list(per_row.columns)[:3]}) differ from the reference's ({len(labels)}, first "
                         f"{labels[:3]}); the champion's reference_stats.json was written by another task version")
    counts = per_row.to_numpy()
    documents = counts[counts.sum(axis=1) > 0]
    n, m = len(documents), int(reference.get("documents", 0))
    reference_counts = np.asarray(reference.get("counts") or [], dtype=np.float64)
    tests: dict[str, dict[str, float | bool | None]] = {}
    bins: list[str] = []
    ref_fracs: list[float] = []
    cur_fracs: list[float] = []
    if n and m and reference_counts.sum() > 0:
        shares = dict(zip(labels, reference_counts / reference_counts.sum(), strict=True))
        buckets = merge_rare_categories(shares, n)
        position = {label: i for i, label in enumerate(labels)}
        membership = np.zeros((len(labels), len(buckets)))
        for j, bucket in enumerate(buckets):
            membership[[position[label] for label in bucket], j] = 1.0
        bucketed = documents @ membership  # documents x buckets, float64
        window_counts = bucketed.sum(axis=0)
        expected_counts = reference_counts @ membership
        expected, observed = expected_counts / expected_counts.sum(), window_counts / window_counts.sum()
        value = psi(expected, observed)
        reference_outer = membership.T @ np.asarray(reference.get("outer"), dtype=np.float64) @ membership
        # Under "same distribution" both sides' documents come from one population: their pooled spread per
        # document, scaled to a window of n and a reference of m documents (as a permutation test would).
        pooled = fraction_covariance(window_counts + expected_counts, bucketed.T @ bucketed + reference_outer, n + m)
        covariance = pooled * (n + m) ** 2 / (n * m)
        p_value, bound = psi_noise(value, expected, covariance, watch.max_p_value)
        tests["psi"] = {"value": value, "p_value": p_value, "noise_bound": bound, "documents": n,
                        "reference_documents": m}
        names = [b[0] if len(b) == 1 else f"{RARE_CATEGORY} ({len(b)})" for b in buckets]
        shown = sorted(np.argsort(-np.abs(observed - expected))[:FIGURE_BUCKETS])
        bins = [names[i] for i in shown]
        ref_fracs, cur_fracs = expected[shown].tolist(), observed[shown].tolist()
    rows = len(per_row)
    tests["null_fraction"] = null_fraction_test(rows - n, rows, float(reference.get("null_fraction", 0.0)),
                                                int(reference.get("rows", 0)))
    return column_verdict(column, "distribution", rows, rows - n, reference, tests, watch, bins, ref_fracs,
                          cur_fracs)
