"""Metrics on hand-checked cases and bootstrap intervals on known cases."""

from __future__ import annotations

import math

import numpy as np

from ctpipe.components.lib.metrics import bootstrap_intervals, compute_metrics, roc_curve
from tests.fixtures.registry import probabilities


def test_metrics_match_hand_computation():
    y = np.array([0, 0, 1, 2])
    p = np.array([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.1, 0.8, 0.1], [0.25, 0.25, 0.5]])
    m = compute_metrics(y, p)
    assert m["accuracy"] == 0.75
    # Class 0: P=1 R=.5 F1=2/3; class 1: P=.5 R=1 F1=2/3; class 2: F1=1.
    assert math.isclose(m["macro_f1"], (2 / 3 + 2 / 3 + 1) / 3)
    assert math.isclose(m["log_loss"], -np.mean(np.log([0.9, 0.2, 0.8, 0.5])))
    assert "roc_auc" not in m


def test_binary_roc_auc_and_curve():
    y = np.array([0, 0, 1, 1])
    p1 = np.array([0.1, 0.4, 0.35, 0.8])
    m = compute_metrics(y, np.stack([1 - p1, p1], axis=1))
    assert math.isclose(m["roc_auc"], 0.75)
    roc = roc_curve(y == 1, p1)
    assert roc["fpr"][0] == 0.0 and roc["fpr"][-1] == 1.0 and roc["tpr"][-1] == 1.0
    assert len(roc["fpr"]) == len(roc["tpr"]) == len(roc["thresholds"])


def test_accuracy_interval_matches_the_binomial_standard_error():
    n = 2000
    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, n)
    correct = np.zeros(n, dtype=bool)
    correct[: int(0.8 * n)] = True
    intervals, _ = bootstrap_intervals(
        y, probabilities(n, 3, correct, y), samples=1000, confidence=0.95, seed=0
    )
    acc = intervals["accuracy"]
    half_width = 1.96 * math.sqrt(0.8 * 0.2 / n)  # ≈ 0.0175
    assert acc.value == 0.8
    assert abs((acc.high - acc.low) / 2 - half_width) < 0.004
    assert acc.low < 0.8 < acc.high


def test_paired_difference_of_identical_models_is_exactly_zero():
    n = 500
    rng = np.random.default_rng(2)
    y = rng.integers(0, 4, n)
    p = probabilities(n, 4, rng.random(n) < 0.7, y)
    _, diffs = bootstrap_intervals(y, p, samples=200, confidence=0.95, seed=0, p_baseline=p.copy())
    for interval in diffs.values():
        assert interval.value == interval.low == interval.high == 0.0


def test_a_small_regression_is_within_noise_and_a_large_one_is_not():
    n = 1000
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, n)
    base_correct = rng.random(n) < 0.8
    champion = probabilities(n, 2, base_correct, y)
    # Small: wrong on 50 rows the champion got right, right on 45 it got wrong (net -0.5 points).
    small = base_correct.copy()
    small[np.flatnonzero(base_correct)[:50]] = False
    small[np.flatnonzero(~base_correct)[:45]] = True
    large = base_correct.copy()
    large[np.flatnonzero(base_correct)[:100]] = False  # 10 points worse on rows the champion got right
    _, d_small = bootstrap_intervals(
        y, probabilities(n, 2, small, y), samples=400, confidence=0.95, seed=0, p_baseline=champion
    )
    _, d_large = bootstrap_intervals(
        y, probabilities(n, 2, large, y), samples=400, confidence=0.95, seed=0, p_baseline=champion
    )
    assert math.isclose(d_small["accuracy"].value, -0.005)
    assert d_small["accuracy"].contains_zero()  # a "regression" within noise
    assert math.isclose(d_large["accuracy"].value, -0.1)
    assert d_large["accuracy"].high < 0  # beyond noise
    # Paired resampling: the interval of the difference is far narrower than an unpaired one would be.
    assert d_large["accuracy"].high - d_large["accuracy"].low < 0.05


def test_bootstrap_is_deterministic_per_seed_and_chunked_consistently():
    n = 300
    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, n)
    p = probabilities(n, 3, rng.random(n) < 0.6, y)
    a, _ = bootstrap_intervals(y, p, samples=100, confidence=0.9, seed=7)
    b, _ = bootstrap_intervals(y, p, samples=100, confidence=0.9, seed=7)
    assert a == b


def test_each_weighted_resample_scores_as_its_rows_resampled_by_hand():
    from ctpipe.components.lib.metrics import _weighted_metrics, resample_weights

    rng = np.random.default_rng(5)
    for n_classes in (2, 3, 5):
        n = 300
        y = rng.integers(0, n_classes, n)
        p = rng.dirichlet(np.ones(n_classes), n).round(1) + 1e-9  # rounded: many tied scores for the AUC
        p /= p.sum(axis=1, keepdims=True)
        weights = next(resample_weights(n, 20, seed=1))
        vectorised = _weighted_metrics(weights, y, p)
        for b in range(20):
            rows = np.repeat(np.arange(n), weights[b].astype(int))
            for name, value in compute_metrics(y[rows], p[rows]).items():
                assert math.isclose(vectorised[name][b], value, abs_tol=1e-9), (n_classes, name, b)


def test_the_prior_predictor_is_the_class_frequencies_of_the_rows():
    from ctpipe.components.lib.metrics import prior_probabilities

    y = np.array([0, 0, 0, 1, 2, 2])
    p = prior_probabilities(y, 4)
    assert p.shape == (6, 4) and np.allclose(p[0], [0.5, 1 / 6, 1 / 3, 0.0])
    assert compute_metrics(y, p)["accuracy"] == 0.5  # the majority class
