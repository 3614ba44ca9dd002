"""The language-model blessing's paired intervals: sign flips of documents (``metrics.sign_flip_interval``).

A causal LM is judged on ~100 documents of very unequal lengths, its metrics ratios of per-document sums. There
the paired bootstrap (even expanded for few units) blocks an equal candidate more often than alpha/2: a few long
documents carry most of the difference and the bootstrap's spread of a ratio underestimates it. Flipping the
sign of each document's difference is the exact null of an equal pair (a fair coin decides which model is which
on every document), so its inverted test keeps the level at any number of documents.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ctpipe.components.lib.metrics import percentile_interval, resample_weights, sign_flip_interval
from ctpipe.components.steps.evaluate import blessing
from ctpipe.components.steps.evaluate.blessing import SIGN_FLIPS, collect_evidence, flip_seed
from ctpipe.components.tasks.causal_lm import make_task
from ctpipe.components.tasks.causal_lm.metrics import BYTES, NLL, TOKENS


def _documents(units: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token counts of documents whose lengths span three orders of magnitude, and how much the two models'
    summed NLL differ on each (a per-token gap that itself varies from document to document)."""
    rng = np.random.default_rng(seed)
    tokens = np.round(np.exp(rng.normal(5, 2.0, units))) + 2
    return tokens, tokens * 0.05 * np.exp(rng.normal(0, 1, units))


def _rows(nll: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    rows = np.zeros((len(nll), 3))
    rows[:, NLL], rows[:, TOKENS], rows[:, BYTES] = nll, tokens, tokens - 1
    return rows


def test_an_equal_language_model_is_blocked_at_most_at_the_nominal_rate_over_unequal_documents(monkeypatch):
    # The level over evaluations is k / (flips + 1) whatever the number of flips (each evaluation draws its own):
    # 2,000 keep this test fast.
    monkeypatch.setattr(blessing, "SIGN_FLIPS", 2000)
    task = make_task()
    tokens, gap = _documents(100, 34)
    base = 2.0 * tokens
    rng = np.random.default_rng(35)
    weights = np.concatenate(list(resample_weights(100, 1000, 0)))
    pairs, blocked, bootstrap_blocked = 3000, 0, 0
    for _ in range(pairs):
        # Which model is the candidate on each document: a fair coin, so the two are equal in distribution.
        sign = np.where(rng.random(100) < 0.5, 1.0, -1.0)
        candidate, champion = _rows(base + sign * gap / 2, tokens), _rows(base - sign * gap / 2, tokens)
        evidence = collect_evidence(np.zeros((100, 2)), candidate, champion, None, samples=200, seed=0,
                                    confidence=0.95, scorer=task.scoring)
        blocked += evidence["loss"].vs_champion.low > 0  # loss is lower-is-better: worse with evidence
        difference = sign * gap
        draws = weights @ difference / (weights @ tokens)
        bootstrap_blocked += percentile_interval(difference.sum() / tokens.sum(), draws, 0.95, units=100).low > 0
    # 3,000 pairs: the rate's standard deviation is 0.28 points at 2.5 %.
    assert bootstrap_blocked / pairs > 0.035  # the expanded percentile bootstrap: 4.6 % against the nominal 2.5 %
    assert blocked / pairs <= 0.03, blocked


def test_over_every_coin_of_ten_documents_the_level_is_at_most_alpha_over_two():
    tokens, gap = _documents(10, 3)
    blocked = 0
    coins = list(itertools.product([-1.0, 1.0], repeat=10))
    for i, coin in enumerate(coins):
        difference = np.asarray(coin) * gap
        interval = sign_flip_interval(difference.sum() / tokens.sum(), difference, tokens, 0.95, samples=2000,
                                      seed=[0, i])
        blocked += interval.low > 0
    # The exact level is floor(0.025 x 2001) / 2001 = 2.50 %: 25.6 of the 1,024 equally likely coins.
    assert blocked <= 30, blocked


def test_a_worse_candidate_is_blocked_and_the_interval_holds_the_point():
    tokens, gap = _documents(100, 34)
    worse = gap + 0.1 * tokens  # 0.1 nat per token worse on every document, beside the documents' noise
    interval = sign_flip_interval(worse.sum() / tokens.sum(), worse, tokens, 0.95, samples=SIGN_FLIPS, seed=0)
    assert 0 < interval.low < interval.value < interval.high
    assert interval.value == pytest.approx(0.1 + gap.sum() / tokens.sum())


def test_the_interval_is_reproducible_and_too_few_flips_exclude_nothing():
    tokens, gap = _documents(50, 1)
    first = sign_flip_interval(0.01, gap, tokens, 0.95, samples=1000, seed=[0, 7])
    assert first == sign_flip_interval(0.01, gap, tokens, 0.95, samples=1000, seed=[0, 7])
    nothing = sign_flip_interval(0.01, gap, tokens, 0.95, samples=20, seed=0)  # 0.025 x 21 < 1 flip per tail
    assert (nothing.low, nothing.high) == (-np.inf, np.inf)


def test_the_blessing_flips_documents_only_where_both_models_share_the_denominators():
    task = make_task()
    tokens, gap = _documents(100, 34)
    candidate = _rows(2.0 * tokens + gap, tokens)
    # A champion with another tokenizer: other token counts, the same bytes.
    champion = _rows(2.0 * tokens, tokens + 5)
    champion[:, BYTES] = candidate[:, BYTES]
    evidence = collect_evidence(np.zeros((100, 2)), candidate, champion, None, samples=1000, seed=0,
                                confidence=0.95, scorer=task.scoring)
    differences = candidate[:, NLL] / np.log(2) - champion[:, NLL] / np.log(2)
    bits = evidence["bits_per_byte"].vs_champion
    assert bits == sign_flip_interval(bits.value, differences, candidate[:, BYTES], 0.95, samples=SIGN_FLIPS,
                                      seed=flip_seed(0, candidate, champion))
    # Per-token loss over different token counts is no difference of per-document sums: the bootstrap judges it.
    weights = np.concatenate(list(resample_weights(100, 1000, 0)))
    draws = weights @ candidate[:, NLL] / (weights @ candidate[:, TOKENS]) - weights @ champion[:, NLL] / (
        weights @ champion[:, TOKENS])
    expected = percentile_interval(evidence["loss"].vs_champion.value, draws, 0.95, units=100)
    assert evidence["loss"].vs_champion.low == pytest.approx(expected.low)
    assert evidence["loss"].vs_champion.high == pytest.approx(expected.high)
