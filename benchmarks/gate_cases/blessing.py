"""Blessing gate cases: simulated candidates and champions on one test split, judged by the real rules.

Each case builds the class probabilities of a candidate (and of a champion, unless it is a first model)
on generated test rows and runs ``ctpipe.components.steps.evaluate.judgement.judge_candidate`` with the default
config (accuracy and log loss: beat the prior predictor with evidence, no evidence of a regression);
``blocked`` is "not blessed". Healthy: equal-quality, better and retrained candidates, informative first
models, an equal candidate over slices and one with ROC AUC undefined on a slice without positives. Broken: the three cases of issue 10 (1.1 points worse beyond
noise, a constant prior predictor, an overconfident candidate), a clearly worse one, one that is worse
on one slice only or on the slice without positives, a random-guess first model.

An equal-quality candidate is, by design, blocked with probability of about 1-3% (two one-sided 2.5%
tests; tests/components/steps/evaluate/test_blessing.py measures it): another --seed may show one such false block.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.config.gate_sections import Threshold
from ctpipe.components.steps.evaluate.judgement import judge_candidate


def _probs(pred: np.ndarray, confidence, n_classes: int) -> np.ndarray:
    n = len(pred)
    conf = np.broadcast_to(np.asarray(confidence, dtype=float), (n,))
    p = np.repeat(((1 - conf) / (n_classes - 1))[:, None], n_classes, axis=1)
    p[np.arange(n), pred] = conf
    return p


def _labels(rng: np.random.Generator, n: int, prior: list[float]) -> np.ndarray:
    return rng.choice(len(prior), n, p=prior)


def _model(rng: np.random.Generator, y: np.ndarray, n_classes: int, accuracy: float, conf=(0.6, 0.9)) -> np.ndarray:
    """Predictions right with probability ``accuracy``, with a confidence drawn from ``conf``."""
    right = rng.random(len(y)) < accuracy
    pred = np.where(right, y, (y + rng.integers(1, n_classes, len(y))) % n_classes)
    return _probs(pred, rng.uniform(*conf, len(y)), n_classes)


def _scored_binary(rng: np.random.Generator, y: np.ndarray, signal: float, noise: float = 1.0) -> np.ndarray:
    """A calibrated logistic score: log-odds = prior + signal * (a noisy view of the label)."""
    base = np.log(y.mean() / (1 - y.mean()))
    latent = signal * (y - y.mean()) + rng.normal(0, noise, len(y))
    p1 = 1 / (1 + np.exp(-(base + latent)))
    return np.stack([1 - p1, p1], axis=1)


def _case(name: str, expected_block: bool, y, candidate, champion, config=None, frame=None) -> dict:
    config = config or Config()
    frame = frame if frame is not None else pd.DataFrame(index=range(len(y)))
    numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
    judgement = judge_candidate(y, candidate, champion, config, frame, numeric)
    failed = [c.message for c in judgement.checks if not c.passed]
    acc = judgement.evidence["accuracy"]
    figure = f"accuracy {acc.candidate.value:.4f}"
    if acc.vs_champion is not None:
        figure += f", vs champion {acc.vs_champion.value:+.4f} [{acc.vs_champion.low:+.4f}, {acc.vs_champion.high:+.4f}]"
    detail = figure + ("; blocked: " + failed[0] if failed else "; blessed")
    return {"name": name, "gate": "bless", "expected_block": expected_block, "blocked": not judgement.passed,
            "detail": detail}


def _segments(n: int, k: int) -> pd.DataFrame:
    return pd.DataFrame({"segment": np.repeat([f"s{i}" for i in range(k)], n // k)})


def cases(seed: int) -> list[dict]:
    rng = np.random.default_rng([10, seed])
    out = []

    # --- healthy --------------------------------------------------------------------------------
    y = _labels(rng, 3000, [0.5, 0.3, 0.2])
    out.append(_case("equal quality, 3 classes", False, y, _model(rng, y, 3, 0.8), _model(rng, y, 3, 0.8)))
    yb = _labels(rng, 4000, [0.9, 0.1])
    out.append(_case("equal quality, rare positives 90/10", False, yb,
                     _scored_binary(rng, yb, 3.0), _scored_binary(rng, yb, 3.0)))
    champion = _model(rng, y, 3, 0.8)
    retrained = np.where(rng.random(len(y))[:, None] < 0.05, _model(rng, y, 3, 0.8), champion)  # 5% of rows differ
    out.append(_case("retrained, nearly the same predictions", False, y, retrained, champion))
    out.append(_case("better by 4 points", False, y, _model(rng, y, 3, 0.84), _model(rng, y, 3, 0.8)))
    out.append(_case("first model, informative, 3 classes", False, y, _model(rng, y, 3, 0.75), None))
    out.append(_case("first model, informative, rare positives", False, yb, _scored_binary(rng, yb, 3.0), None))
    sliced = Config()
    sliced.evaluate.slices = ["segment"]
    ys = _labels(rng, 2400, [0.5, 0.3, 0.2])
    out.append(_case("equal quality over 8 slices", False, ys, _model(rng, ys, 3, 0.8), _model(rng, ys, 3, 0.8),
                     sliced, _segments(2400, 8)))

    # A slice without positives: ROC AUC is undefined there for both models, which is no regression.
    auc = Config()
    auc.evaluate.thresholds["roc_auc"] = Threshold(change_abs=0.0)
    auc.evaluate.slices = ["segment"]
    segment_ab = rng.choice(["a", "b"], 4000)
    y_ab = np.where(segment_ab == "b", 0, (rng.random(4000) < 0.4).astype(int))
    champion_ab = _scored_binary(rng, y_ab, 3.0)
    retrained_ab = np.where(rng.random(4000)[:, None] < 0.05, _scored_binary(rng, y_ab, 3.0), champion_ab)
    out.append(_case("equal quality, ROC AUC on a slice without positives", False, y_ab, retrained_ab, champion_ab,
                     auc, pd.DataFrame({"segment": segment_ab})))

    # --- broken ---------------------------------------------------------------------------------
    n = 10_000
    y2 = _labels(rng, n, [0.7, 0.3])
    champion_right = rng.random(n) < 0.911
    candidate_right = champion_right.copy()
    candidate_right[np.flatnonzero(champion_right)[:150]] = False
    candidate_right[np.flatnonzero(~champion_right)[:40]] = True  # net 1.1 points worse
    out.append(_case("1.1 points worse, interval below zero", True, y2,
                     _probs(np.where(candidate_right, y2, 1 - y2), 0.85, 2),
                     _probs(np.where(champion_right, y2, 1 - y2), 0.85, 2)))
    prior = np.bincount(yb, minlength=2) / len(yb)
    out.append(_case("constant prior predictor, 90/10, first model", True, yb, np.tile(prior, (len(yb), 1)), None))
    pred = np.where(rng.random(len(y)) < 0.8, y, (y + 1) % 3)
    out.append(_case("overconfident, equal accuracy", True, y, _probs(pred, 0.995, 3), _probs(pred, 0.8, 3)))
    champion = _model(rng, y, 3, 0.8)
    worse = champion.copy()
    flip = np.flatnonzero(champion.argmax(1) == y)[: int(0.03 * len(y))]
    worse[flip] = np.roll(worse[flip], 1, axis=1)  # wrong on 3% of the rows the champion gets right
    out.append(_case("worse by 3 points", True, y, worse, champion))
    out.append(_case("random guess, first model", True, y, _probs(rng.integers(0, 3, len(y)), 0.5, 3), None))
    champion_s = _model(rng, ys, 3, 0.8)
    segment = _segments(2400, 8)["segment"].to_numpy()
    right = champion_s.argmax(1) == ys
    worse = champion_s.copy()
    lost = np.flatnonzero((segment == "s2") & right)[:60]  # 20 points worse on slice s2 ...
    gained = np.flatnonzero((segment != "s2") & ~right)[:60]  # ... and as much better elsewhere: equal overall
    worse[lost] = np.roll(worse[lost], 1, axis=1)
    worse[gained] = _probs(ys[gained], champion_s[gained].max(1), 3)
    out.append(_case("worse on one slice only, equal overall", True, ys, worse, champion_s, sliced,
                     _segments(2400, 8)))
    worse_ab = champion_ab.copy()
    in_b = segment_ab == "b"
    worse_ab[in_b] = worse_ab[in_b][:, ::-1]  # predicts the class the slice does not have
    out.append(_case("worse on the slice without positives", True, y_ab, worse_ab, champion_ab, auc,
                     pd.DataFrame({"segment": segment_ab})))
    return out
