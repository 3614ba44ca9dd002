"""Blessing rules on paired intervals: value floors, the prior-predictor floor, change rules, slices.

Unit tests of each rule on hand-made evidence, then the three cases the old point-estimate rules
blessed (a 1.1-point regression beyond noise, a constant prior predictor, an overconfident candidate),
then simulations: an equal candidate is blocked at most at the nominal rate, overall and per slice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config, EvaluationConfig, Threshold
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.metrics import Interval, bootstrap_intervals
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.evaluate.blessing import Evidence, judge
from ctpipe.components.steps.evaluate.judgement import evaluate_slices, judge_candidate


def _passed(checks) -> bool:
    return all(c.passed for c in checks)


def _evidence(value, *, ci=0.01, champion=None, diff=None, baseline=None, gain=None) -> dict[str, Evidence]:
    """Evidence for one metric; ``diff``/``gain`` are (low, high) of candidate − champion / − baseline."""
    return Evidence(
        candidate=Interval(value, value - ci, value + ci),
        champion=champion,
        vs_champion=None if diff is None else Interval(value - champion, *diff),
        baseline=baseline,
        vs_baseline=None if gain is None else Interval(value - baseline, *gain),
    )


# --- the rules on hand-made evidence ---------------------------------------------------------------


def test_an_absolute_value_threshold_is_a_floor_or_a_ceiling():
    assert _passed(judge({"accuracy": Threshold(value=0.7)}, {"accuracy": _evidence(0.71)}))
    failed = judge({"accuracy": Threshold(value=0.7)}, {"accuracy": _evidence(0.69)})
    assert not _passed(failed) and "accuracy 0.6900 fails value threshold >= 0.7000" in failed[0].message
    assert _passed(judge({"log_loss": Threshold(value=0.5)}, {"log_loss": _evidence(0.4)}))
    assert not _passed(judge({"log_loss": Threshold(value=0.5)}, {"log_loss": _evidence(0.6)}))
    # An explicit direction wins over the metric's default.
    assert _passed(judge({"log_loss": Threshold(value=0.5, direction="higher")}, {"log_loss": _evidence(0.6)}))


def test_the_baseline_floor_needs_the_whole_interval_of_the_gain_above_zero():
    rule = {"accuracy": Threshold(value="baseline")}
    assert _passed(judge(rule, {"accuracy": _evidence(0.93, baseline=0.90, gain=(0.01, 0.05))}))
    at_zero = judge(rule, {"accuracy": _evidence(0.90, baseline=0.90, gain=(0.0, 0.0))})
    assert not _passed(at_zero) and "fails value threshold 'baseline'" in at_zero[0].message
    assert not _passed(judge(rule, {"accuracy": _evidence(0.91, baseline=0.90, gain=(-0.01, 0.03))}))
    # Lower-is-better: a gain means a LOWER log loss than the prior predictor's.
    ll = {"log_loss": Threshold(value="baseline")}
    assert _passed(judge(ll, {"log_loss": _evidence(0.30, baseline=0.33, gain=(-0.05, -0.01))}))
    assert not _passed(judge(ll, {"log_loss": _evidence(0.36, baseline=0.33, gain=(0.01, 0.05))}))


def test_a_change_rule_blocks_only_when_the_interval_shows_a_regression_beyond_it():
    rule = {"accuracy": Threshold(change_abs=-0.02)}
    # 3 points worse on the point estimate, but the interval reaches -0.01: no evidence beyond -0.02.
    noisy = judge(rule, {"accuracy": _evidence(0.77, champion=0.80, diff=(-0.05, -0.01))})
    assert _passed(noisy) and "no evidence of a change below the allowed change -0.0200" in noisy[0].message
    real = judge(rule, {"accuracy": _evidence(0.75, champion=0.80, diff=(-0.07, -0.03))})
    assert not _passed(real) and "the interval shows it worse than the allowed change -0.0200" in real[0].message
    # The default tolerance 0: any regression beyond noise blocks, a noisy one does not.
    zero = {"accuracy": Threshold(change_abs=0.0)}
    assert not _passed(judge(zero, {"accuracy": _evidence(0.789, champion=0.80, diff=(-0.016, -0.006))}))
    assert _passed(judge(zero, {"accuracy": _evidence(0.795, champion=0.80, diff=(-0.015, 0.004))}))


def test_relative_change_in_the_lower_is_better_direction():
    rule = {"log_loss": Threshold(change_rel=-0.05)}
    # Allowed: up to 5% of the champion's 0.50 = 0.025 worse. The interval's best case decides.
    assert _passed(judge(rule, {"log_loss": _evidence(0.53, champion=0.50, diff=(0.01, 0.05))}))
    checks = judge(rule, {"log_loss": _evidence(0.56, champion=0.50, diff=(0.03, 0.09))})
    assert not _passed(checks) and checks[0].kind == "change_rel"


def test_first_model_is_judged_on_value_thresholds_alone_and_a_missing_metric_fails():
    checks = judge({"accuracy": Threshold(value=0.5, change_abs=0.5)}, {"accuracy": _evidence(0.6)})
    assert [c.kind for c in checks] == ["value"] and _passed(checks)
    assert not _passed(judge({"roc_auc": Threshold(value=0.5)}, {"accuracy": _evidence(0.9)}))


def test_threshold_config_validation_and_set_override():
    with pytest.raises(ConfigError, match="at least one of value"):
        Threshold(direction="lower")
    with pytest.raises(ConfigError, match="'baseline'"):
        Threshold(value="majority")
    with pytest.raises(ConfigError, match="is not a metric name"):
        EvaluationConfig(thresholds={"f2 score": Threshold(value=1)})
    with pytest.raises(ConfigError, match="evaluate.bootstrap_samples"):
        EvaluationConfig(bootstrap_samples=100)
    cfg = load_config(
        None, ["evaluate.thresholds.accuracy.value=0.7", "evaluate.thresholds.log_loss.change_rel=-0.1"]
    )
    assert cfg.evaluate.thresholds["accuracy"].value == 0.7
    assert cfg.evaluate.thresholds["log_loss"].change_rel == -0.1
    assert load_config(None, ["evaluate.thresholds.macro_f1.value=baseline"]).evaluate.thresholds["macro_f1"].value == "baseline"
    assert Config.from_json(cfg.to_json()).evaluate.thresholds == cfg.evaluate.thresholds


def test_the_defaults_judge_accuracy_and_log_loss_on_evidence_with_enough_resamples():
    ev = EvaluationConfig()
    assert set(ev.thresholds) == {"accuracy", "log_loss"}
    assert all(rule.value == "baseline" and rule.change_abs == 0.0 for rule in ev.thresholds.values())
    assert ev.bootstrap_samples >= 1000 and ev.confidence == 0.95 and ev.slice_min_rows >= 100


# --- the cases the point-estimate rules blessed -----------------------------------------------------


def _probs(y: np.ndarray, pred: np.ndarray, confidence, n_classes: int) -> np.ndarray:
    """``confidence`` on the predicted class, the rest spread evenly."""
    n = len(y)
    conf = np.broadcast_to(np.asarray(confidence, dtype=float), (n,))
    p = np.repeat(((1 - conf) / (n_classes - 1))[:, None], n_classes, axis=1)
    p[np.arange(n), pred] = conf
    return p


def _judge(y, p_candidate, p_champion, config=None, frame=None):
    config = config or Config()
    frame = frame if frame is not None else pd.DataFrame(index=range(len(y)))
    return judge_candidate(y, p_candidate, p_champion, config, frame, numeric_columns=[])


def test_a_candidate_1_1_points_worse_beyond_noise_is_not_blessed():
    rng = np.random.default_rng(0)
    n = 10_000
    y = (rng.random(n) < 0.3).astype(int)
    champion_right = np.zeros(n, dtype=bool)
    champion_right[rng.permutation(n)[:9110]] = True  # 91.1%
    candidate_right = champion_right.copy()
    candidate_right[np.flatnonzero(champion_right)[:150]] = False
    candidate_right[np.flatnonzero(~champion_right)[:40]] = True  # net -110 rows: 90.0%
    champion = _probs(y, np.where(champion_right, y, 1 - y), 0.85, 2)
    candidate = _probs(y, np.where(candidate_right, y, 1 - y), 0.85, 2)
    _, diff = bootstrap_intervals(y, candidate, samples=1000, confidence=0.95, seed=0, p_baseline=champion)
    assert diff["accuracy"].value == pytest.approx(-0.011)
    assert diff["accuracy"].high < 0  # the case: its paired 95% interval lies wholly below zero
    judgement = _judge(y, candidate, champion)
    assert not judgement.passed
    blocking = [c for c in judgement.checks if not c.passed]
    assert [(c.metric, c.kind) for c in blocking][0] == ("accuracy", "change_abs")
    assert "the interval shows it worse than the allowed change +0.0000" in blocking[0].message


def test_a_constant_prior_predictor_does_not_pass_the_first_model_floor():
    n = 2000
    y = np.zeros(n, dtype=int)
    y[:202] = 1  # 90/10 data: the majority class is 89.9%
    prior = np.tile([0.9, 0.1], (n, 1))  # what a model that learnt only the class prior predicts
    judgement = _judge(y, prior, None)
    assert judgement.evidence["accuracy"].candidate.value == pytest.approx(0.899)
    assert judgement.evidence["roc_auc"].candidate.value == pytest.approx(0.5)
    assert not judgement.passed
    failed = {c.metric for c in judgement.checks if not c.passed}
    assert failed == {"accuracy", "log_loss"}
    assert all("prior predictor" in c.message for c in judgement.checks)


def test_a_model_that_learnt_something_passes_the_first_model_floor():
    rng = np.random.default_rng(1)
    n = 2000
    y = (rng.random(n) < 0.1).astype(int)
    score = np.clip(0.1 + 0.5 * y + rng.normal(0, 0.15, n), 0.01, 0.99)  # informative, calibrated-ish
    judgement = _judge(y, np.stack([1 - score, score], axis=1), None)
    assert judgement.passed, [c.message for c in judgement.checks]


def test_an_overconfident_candidate_with_equal_accuracy_is_not_blessed():
    rng = np.random.default_rng(2)
    n = 3000
    y = rng.integers(0, 3, n)
    pred = np.where(rng.random(n) < 0.8, y, (y + 1) % 3)
    champion = _probs(y, pred, 0.8, 3)
    overconfident = _probs(y, pred, 0.995, 3)  # the same predictions, far too sure of them
    judgement = _judge(y, overconfident, champion)
    assert judgement.evidence["accuracy"].vs_champion.value == 0.0
    assert not judgement.passed
    failed = [(c.metric, c.kind) for c in judgement.checks if not c.passed]
    assert ("log_loss", "change_abs") in failed and all(metric == "log_loss" for metric, _ in failed)


def test_a_better_candidate_is_blessed():
    rng = np.random.default_rng(3)
    n = 3000
    y = rng.integers(0, 3, n)
    right = rng.random(n)
    champion = _probs(y, np.where(right < 0.75, y, (y + 1) % 3), 0.7, 3)
    candidate = _probs(y, np.where(right < 0.85, y, (y + 1) % 3), 0.8, 3)
    assert _judge(y, candidate, champion).passed


# --- simulations: an equal candidate is not blocked by chance, a worse one is ------------------------


def _equal_quality(rng: np.random.Generator, n: int, n_classes: int = 3):
    """Labels and two independent models of the same quality (same accuracy and calibration in law)."""
    y = rng.integers(0, n_classes, n)

    def model() -> np.ndarray:
        right = rng.random(n) < 0.8
        pred = np.where(right, y, (y + rng.integers(1, n_classes, n)) % n_classes)
        return _probs(y, pred, rng.uniform(0.6, 0.9, n), n_classes)

    return y, model(), model()


def test_an_equal_candidate_is_blocked_at_most_at_the_nominal_rate():
    config = Config()
    config.evaluate.bootstrap_samples = 1000
    blocked = 0
    runs = 200
    for seed in range(runs):
        y, champion, candidate = _equal_quality(np.random.default_rng(1000 + seed), 800)
        config.evaluate.seed = seed
        blocked += not _judge(y, candidate, champion, config).passed
    # Two one-sided 2.5% tests (accuracy, log loss): at most 5% in all (measured 1.3% over 600 other runs).
    assert blocked / runs <= 0.05, blocked


def test_a_candidate_worse_by_two_points_is_blocked_in_most_runs():
    config = Config()
    blocked = 0
    runs = 50
    for seed in range(runs):
        rng = np.random.default_rng(2000 + seed)
        y, champion, _ = _equal_quality(rng, 3000)
        pred = champion.argmax(axis=1)
        worse = pred.copy()
        flip = np.flatnonzero(pred == y)[: int(0.02 * len(y))]
        worse[flip] = (y[flip] + 1) % 3
        candidate = _probs(y, worse, champion.max(axis=1), 3)
        config.evaluate.seed = seed
        blocked += not _judge(y, candidate, champion, config).passed
    assert blocked == runs


def _sliced(rng: np.random.Generator, n_per_slice: int, slices: int):
    y, champion, candidate = _equal_quality(rng, n_per_slice * slices)
    frame = pd.DataFrame({"segment": np.repeat([f"s{i}" for i in range(slices)], n_per_slice)})
    return frame, y, champion, candidate


def test_an_equal_candidate_is_not_blocked_by_chance_on_one_of_many_slices():
    config = Config()
    config.evaluate.slices = ["segment"]
    runs, blocked_by_slices = 120, 0
    for seed in range(runs):
        frame, y, champion, candidate = _sliced(np.random.default_rng(3000 + seed), 150, 8)
        config.evaluate.seed = seed
        rows, _ = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=[])
        assert all(r["judged"] for r in rows)
        blocked_by_slices += any(r["blocking"] for r in rows)
    # 16 slice checks, Bonferroni: nominally at most 2.5% of equal candidates blocked by some slice
    # (measured 1.7% over 600 runs; 4 of these 120). Without the correction, each slice at 95%: 20%.
    # The bound leaves room for the binomial noise of 120 runs (2 sigma = 2.9 points).
    assert blocked_by_slices / runs <= 0.05, blocked_by_slices


def test_a_slice_that_regresses_beyond_noise_blocks_and_is_named():
    rng = np.random.default_rng(4)
    frame, y, champion, _ = _sliced(rng, 400, 4)
    pred = champion.argmax(axis=1)
    worse = pred.copy()
    in_s2 = np.flatnonzero((frame["segment"] == "s2").to_numpy() & (pred == y))
    worse[in_s2[:60]] = (y[in_s2[:60]] + 1) % 3  # 15 points worse on s2 only, 3.75 points overall
    candidate = _probs(y, worse, champion.max(axis=1), 3)
    config = Config()
    config.evaluate.slices = ["segment"]
    rows, checks = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=[])
    assert [r["slice"] for r in rows if r["blocking"]] == ["segment=s2"]
    assert any("slice segment=s2" in c.message and not c.passed for c in checks)
    assert rows[0]["confidence"] == pytest.approx(1 - 0.05 / 8)  # 4 slices x 2 change rules


def test_a_metric_undefined_on_a_slice_is_reported_not_judged_as_a_regression():
    # ROC AUC needs both classes; on a segment without positives it is undefined for every model alike.
    rng = np.random.default_rng(11)
    n = 4000
    segment = rng.choice(["a", "b"], n)
    y = np.where(segment == "b", 0, (rng.random(n) < 0.4).astype(int))
    score = np.clip(0.4 + 0.3 * (y - 0.4) + rng.normal(0, 0.2, n), 0.01, 0.99)
    model = np.column_stack([1 - score, score])
    config = Config()
    config.evaluate.thresholds["roc_auc"] = Threshold(change_abs=0.0)
    config.evaluate.slices = ["segment"]
    judged = judge_candidate(y, model, model.copy(), config, pd.DataFrame({"segment": segment}), [])
    assert judged.passed, [c.message for c in judged.checks if not c.passed]  # the same model as the champion
    row = next(r for r in judged.slices if r["slice"] == "segment=b")
    assert row["judged"] and row["undefined"] == ["roc_auc"] and not row["blocking"]
    assert not any(c.slice == "segment=b" and c.metric == "roc_auc" for c in judged.checks)
    # A candidate that is worse on the segment's defined metrics is still blocked there.
    worse = model.copy()
    in_b = segment == "b"
    worse[in_b] = worse[in_b][:, ::-1]  # predicts the absent class on every row of b
    judged = judge_candidate(y, worse, model, config, pd.DataFrame({"segment": segment}), [])
    assert not judged.passed and [r["slice"] for r in judged.slices if r["blocking"]] == ["segment=b"]


def test_small_slices_are_reported_but_not_judged():
    rng = np.random.default_rng(5)
    frame, y, champion, candidate = _sliced(rng, 60, 3)
    config = Config()
    config.evaluate.slices = ["segment"]
    rows, checks = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=[])
    assert len(rows) == 3 and not any(r["judged"] for r in rows) and not checks
    config.evaluate.slice_min_rows = 50
    rows, checks = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=[])
    assert all(r["judged"] for r in rows) and checks


def test_numeric_slices_are_quartiles():
    rng = np.random.default_rng(6)
    y, champion, candidate = _equal_quality(rng, 800)
    frame = pd.DataFrame({"tenure": np.arange(800, dtype=float)})
    config = Config()
    config.evaluate.slices = ["tenure"]
    rows, _ = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=["tenure"])
    assert [r["rows"] for r in rows] == [200, 200, 200, 200]


def test_auto_direction_follows_the_task_metric_not_a_higher_is_better_guess():
    # bits_per_byte (a causal_lm metric) is lower-is-better; evaluation passes the task's directions.
    lower = {"bits_per_byte": False}
    rule = {"bits_per_byte": Threshold(value="baseline")}
    better = {"bits_per_byte": _evidence(4.52, baseline=4.73, gain=(-0.27, -0.15))}
    assert _passed(judge(rule, better, directions=lower))
    worse = {"bits_per_byte": _evidence(4.90, baseline=4.73, gain=(0.10, 0.25))}
    assert not _passed(judge(rule, worse, directions=lower))


def test_auto_direction_of_a_metric_nobody_knows_is_a_clear_error_not_a_guess():
    rule = {"mystery_score": Threshold(value=0.5)}
    with pytest.raises(ConfigError, match="mystery_score.*direction"):
        judge(rule, {"mystery_score": _evidence(0.6)})
