"""The byte-histogram drift test's noise bound: documents are the draws, with the spread a bootstrap shows."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.drift.column_drift import psi_p_value
from ctpipe.components.lib.drift.histogram_drift import fraction_covariance, histogram_drift, psi_noise


def _documents(rng, n, shares, length=200, clumpy=True):
    """Documents of ``length`` bytes over len(shares) bins; clumpy ones each draw from their own mix."""
    mixes = rng.dirichlet(np.asarray(shares) * 20, size=n) if clumpy else np.tile(shares, (n, 1))
    return np.stack([rng.multinomial(length, mix) for mix in mixes]).astype(float)


def test_the_covariance_is_what_a_bootstrap_over_documents_shows():
    rng = np.random.default_rng(0)
    docs = _documents(rng, 300, [0.5, 0.3, 0.15, 0.05])
    exact = fraction_covariance(docs.sum(axis=0), docs.T @ docs, len(docs))
    resampled = [docs[rng.integers(0, len(docs), len(docs))].sum(axis=0) for _ in range(4000)]
    fractions = np.array([r / r.sum() for r in resampled])
    assert np.allclose(exact, np.cov(fractions.T), rtol=0.15, atol=1e-7)
    # Far wider than the multinomial's: the bytes of a document are not independent draws.
    p = docs.sum(axis=0) / docs.sum()
    assert np.all(np.diag(exact) > 5 * p * (1 - p) / docs.sum())


def test_with_one_byte_per_document_the_bound_is_the_multinomial_one():
    expected = np.array([0.5, 0.3, 0.15, 0.05])
    n, m = 400, 1000
    covariance = (np.diag(expected) - np.outer(expected, expected)) * (1 / n + 1 / m)
    p_value, _ = psi_noise(0.02, expected, covariance, 0.001)
    assert p_value == pytest.approx(psi_p_value(0.02, n, m, 4), rel=1e-6)


def _reference(docs, labels):
    return {"labels": labels, "counts": docs.sum(axis=0).astype(int).tolist(), "outer": (docs.T @ docs).tolist(),
            "rows": len(docs), "documents": len(docs), "null_fraction": 0.0}


def test_clumpy_documents_of_one_source_do_not_drift_even_with_the_effect_threshold_off():
    labels, shares = ["a", "b", "c", "d"], [0.5, 0.3, 0.15, 0.05]
    watch = WatchConfig(column_thresholds={"h": {"psi": 1e-9}})
    flagged, flagged_counting_bytes = 0, 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        reference = _reference(_documents(rng, 600, shares), labels)
        column = histogram_drift("h", pd.DataFrame(_documents(rng, 300, shares), columns=labels), reference, watch)
        flagged += column.drifted
        bytes_as_draws = psi_p_value(column.tests["psi"]["value"], 300 * 200, 600 * 200, 4)
        flagged_counting_bytes += bytes_as_draws < watch.max_p_value
    assert flagged == 0
    assert flagged_counting_bytes >= 10  # the test can fail: a bound over bytes flags most of these windows


def test_a_shifted_source_drifts_and_other_bins_are_a_clear_error():
    labels = ["a", "b", "c", "d"]
    rng = np.random.default_rng(1)
    reference = _reference(_documents(rng, 600, [0.5, 0.3, 0.15, 0.05]), labels)
    shifted = pd.DataFrame(_documents(rng, 300, [0.3, 0.5, 0.15, 0.05]), columns=labels)
    column = histogram_drift("h", shifted, reference, WatchConfig())
    assert column.kind == "distribution" and column.drifted and column.statistic == "psi"
    assert column.tests["psi"]["value"] > column.tests["psi"]["noise_bound"]
    with pytest.raises(ValueError, match="differ from the reference"):
        histogram_drift("h", shifted.rename(columns={"d": "e"}), reference, WatchConfig())


def test_a_window_of_rows_without_a_value_has_no_psi_and_a_null_fraction():
    labels = ["a", "b"]
    reference = _reference(np.array([[3.0, 1.0], [2.0, 2.0]]), labels)
    column = histogram_drift("h", pd.DataFrame(np.zeros((5, 2)), columns=labels), reference, WatchConfig())
    assert "psi" not in column.tests and column.null_fraction == 1.0
    assert column.tests["null_fraction"]["value"] == 1.0
