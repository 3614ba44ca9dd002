"""Drift of a text's byte-class profile judged jointly: one test over the shares of one text column.

Each ``<prefix>__<class>_share`` column (``causal_lm``'s letters, upper case, digits, whitespace,
punctuation, non-ASCII) is judged alone by feature_drift.py; a window that mixes in 30 % of another source moves
each share a little, under what one column's KS can see at p < 0.001 in 200 documents, but moves them
together. This test pools that evidence: each share is mapped to normal scores of its mid-rank among the
pooled reference and window documents (the shares are bounded, skewed and often zero: ranks make the test
robust to that), and the window's mean score vector is compared with the reference's by the Mahalanobis
distance under the reference's covariance (a two-sample Hotelling T²; the window's own covariance is left
out: another source mixed in widens it, which would hide the shift). Its p-value is a permutation test over
the pooled documents, exact whatever the shares' distributions: on same-source resamples the F approximation
fired 1 % of the time at p < 0.001 (the zero-inflated digit and non-ASCII shares have heavy-tailed means).
Its effect size is the distance, in standard deviations of the scores.

The reference's per-column samples are joint rows: every column's quantile sample keeps the rows of the
smallest row priorities (``stream_stats.BottomK``), and the shares of one text are NaN together (a
null, invalid or empty text), so the i-th value of every share's sample is the same document.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.drift.column_drift import ColumnDrift, column_verdict

PROFILE_SUFFIX = "__profile"


def profile_groups(
    reference_numeric: dict[str, Any], columns: pd.Index, share_names: Collection[str]
) -> dict[str, list[str]]:
    """``<prefix>__profile`` -> the share columns of one text (``<prefix>__<name>`` for each name of
    ``share_names``, a task's jointly judged columns such as ``causal_lm``'s ``text_stats.SHARE_NAMES``: a user's
    own columns named otherwise are not joint rows) that the reference and the window both hold, with samples of
    one length; only groups of two or more."""
    groups: dict[str, list[str]] = {}
    for name in reference_numeric:
        prefix, sep, rest = name.rpartition("__")
        if sep and rest in share_names and name in columns:
            groups.setdefault(prefix + PROFILE_SUFFIX, []).append(name)
    out = {}
    for profile, names in groups.items():
        lengths = {len(reference_numeric[n].get("sample") or []) for n in names}
        if len(names) >= 2 and len(lengths) == 1 and lengths != {0}:
            out[profile] = names
    return out


PERMUTATIONS = 2000  # the p-value's resolution is 1/2001, under watch.max_p_value's default 0.001
MAX_ROWS = 2000  # rows per side: a uniform seeded subsample of a larger reference sample or window
_CELLS = 4_000_000  # permuted score cells per chunk: memory stays bounded


def _pooled_normal_scores(rows: np.ndarray) -> np.ndarray:
    """Each column's normal scores of its mid-ranks among all rows (ties, e.g. many zeros, share one): bounded and
    symmetric whatever the shares' skew, and the same whichever rows are labelled window."""
    ranks = stats.rankdata(rows, axis=0)
    return stats.norm.ppf((ranks - 0.5) / len(rows))


def _distances2(
    scores: np.ndarray, window_rows: np.ndarray, total: np.ndarray, outer: np.ndarray
) -> np.ndarray:
    """Squared Mahalanobis distance between the window's and the reference's mean scores under the reference's
    covariance, for each labelling (a row of ``window_rows``: which pooled rows are the window's)."""
    n, m = window_rows.shape[1], len(scores) - window_rows.shape[1]
    picked = scores[window_rows]  # labellings x n x p
    sum_w = picked.sum(axis=1)
    outer_w = picked.transpose(0, 2, 1) @ picked
    mean_w, mean_r = sum_w / n, (total - sum_w) / m
    cov_r = (outer - outer_w - m * mean_r[:, :, None] * mean_r[:, None, :]) / (m - 1)
    diff = mean_w - mean_r
    return np.einsum("bp,bp->b", diff, np.linalg.solve(cov_r, diff[:, :, None])[:, :, 0])


def profile_test(
    reference: np.ndarray, window: np.ndarray, *, permutations: int = PERMUTATIONS
) -> dict[str, float]:
    """The Mahalanobis distance between the window's and the reference's mean normal-score profiles (rows are
    documents, columns shares) and its permutation p-value: the share of random relabellings of the pooled
    documents as window and reference whose distance is at least as large (exact under "same distribution",
    whatever the shares' distributions; seeded, so a report is reproducible)."""
    rng = np.random.default_rng(0)
    if len(reference) > MAX_ROWS:
        reference = reference[np.sort(rng.choice(len(reference), MAX_ROWS, replace=False))]
    if len(window) > MAX_ROWS:
        window = window[np.sort(rng.choice(len(window), MAX_ROWS, replace=False))]
    scores = _pooled_normal_scores(np.vstack([reference, window]))
    scores = scores[
        :, np.ptp(scores, axis=0) > 0
    ]  # a share constant in both (no digits at all) carries nothing
    m, n, p = len(reference), len(window), scores.shape[1]
    if p == 0 or n < 2 or m <= p + 1:
        return {"value": 0.0, "p_value": 1.0, "shares": p}
    total, outer = scores.sum(axis=0), scores.T @ scores
    observed = float(_distances2(scores, np.arange(m, m + n)[None], total, outer)[0])
    at_least, chunk = 0, max(1, _CELLS // (n * p))
    for start in range(0, permutations, chunk):
        k = min(chunk, permutations - start)
        labellings = rng.permuted(np.tile(np.arange(m + n), (k, 1)), axis=1)[:, :n]
        # A relative tolerance: the observed labelling's own distance, recomputed, must count as "as large".
        at_least += int((_distances2(scores, labellings, total, outer) >= observed * (1 - 1e-9)).sum())
    p_value = (1 + at_least) / (1 + permutations)
    return {"value": float(np.sqrt(max(observed, 0.0))), "p_value": p_value, "shares": p}


def profile_drift(
    profile: str,
    columns: list[str],
    current: pd.DataFrame,
    reference_numeric: dict[str, Any],
    watch: WatchConfig,
) -> ColumnDrift:
    """The joint test of one text's shares (``profile_groups``) as a column of the drift report."""
    reference = np.column_stack(
        [np.asarray(reference_numeric[c]["sample"], dtype="float64") for c in columns]
    )
    window = current[columns].apply(pd.to_numeric, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    window = window[np.isfinite(window).all(axis=1)]
    reference = reference[np.isfinite(reference).all(axis=1)]
    tests: dict[str, dict[str, float | bool | None]] = {"mahalanobis": dict(profile_test(reference, window))}
    # For the figure: each share's mean, reference and window (none without window rows).
    bins = columns if len(window) and len(reference) else []
    ref_means = reference.mean(axis=0).tolist() if bins else []
    cur_means = window.mean(axis=0).tolist() if bins else []
    return column_verdict(
        profile,
        "profile",
        len(current),
        len(current) - len(window),
        {},
        tests,
        watch,
        bins,
        ref_means,
        cur_means,
    )
