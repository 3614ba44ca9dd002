"""The blessing's paired intervals over few resampled units (a causal LM's ~100 documents): the plain
percentile bootstrap under-covers there; the expanded interval (sqrt(n/(n-1)) × t/z) keeps its level."""

from __future__ import annotations

import numpy as np

from ctpipe.components.lib.metrics import percentile_interval, resample_weights, small_sample_widening
from ctpipe.components.steps.evaluate.blessing import collect_evidence


def test_an_equal_pair_over_ten_units_is_called_worse_at_most_at_the_nominal_rate():
    # Per-unit differences of two exchangeable models (a fair coin decides each unit's sign): no difference
    # on the population, so any interval lying wholly above 0 ("the candidate is worse") is a false block.
    units, pairs = 10, 4000
    rng = np.random.default_rng(34)
    # The blessing's seed is fixed: every pair is judged on the same resamples.
    weights = next(resample_weights(units, 1000, 0))
    differences = rng.uniform(-1, 1, (pairs, units)) * rng.choice([-1, 1], (pairs, units))
    means = differences @ weights.T / units
    plain = np.mean(
        [percentile_interval(d.mean(), m, 0.95).low > 0 for d, m in zip(differences, means, strict=True)]
    )
    expanded = np.mean(
        [
            percentile_interval(d.mean(), m, 0.95, units=units).low > 0
            for d, m in zip(differences, means, strict=True)
        ]
    )
    assert plain > 0.035  # the plain percentile interval: 4.5 % against the nominal 2.5 %
    assert expanded <= 0.03  # the nominal 2.5 % within the noise of 4,000 pairs (sd 0.25 %)


def test_the_widening_is_what_few_units_need_and_nothing_at_many():
    assert small_sample_widening(None, 0.95) == 1.0
    assert 1.015 < small_sample_widening(100, 0.95) < 1.02  # sqrt(100/99) × 1.984/1.960
    assert 1.0 < small_sample_widening(5000, 0.95) < 1.001
    assert small_sample_widening(20, 0.999) > small_sample_widening(20, 0.95)  # t's tails grow with the level


def test_the_blessing_widens_its_paired_intervals_by_the_number_of_rows():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 30)
    candidate, champion = (np.column_stack([1 - p, p]) for p in rng.uniform(0.1, 0.9, (2, 30)))
    evidence = collect_evidence(y, candidate, champion, None, samples=1000, seed=0, confidence=0.95)[
        "log_loss"
    ]
    plain = percentile_interval(
        evidence.vs_champion.value,
        _log_loss_draws(y, candidate) - _log_loss_draws(y, champion),
        0.95,
    )
    widen = small_sample_widening(30, 0.95)
    assert np.isclose(evidence.vs_champion.low, plain.value - widen * (plain.value - plain.low))
    assert np.isclose(evidence.vs_champion.high, plain.value + widen * (plain.high - plain.value))


def _log_loss_draws(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    nll = -np.log(np.clip(p[np.arange(len(y)), y], 1e-7, 1.0))
    weights = np.concatenate(list(resample_weights(len(y), 1000, 0)))
    return weights @ nll / weights.sum(axis=1)
