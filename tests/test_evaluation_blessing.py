"""Blessing rules: value, absolute and relative change, direction, first model, no thresholds, slices."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from components.config import Config, EvaluationConfig, Threshold, load_config
from components.errors import ConfigError
from components.evaluation.blessing import judge
from components.evaluation.evaluate import evaluate_slices


def _passed(checks) -> bool:
    return all(c.passed for c in checks)


def test_value_threshold_higher_is_better():
    rules = {"accuracy": Threshold(value=0.7)}
    assert _passed(judge(rules, {"accuracy": 0.71}, None))
    failed = judge(rules, {"accuracy": 0.69}, None)
    assert not _passed(failed)
    assert "accuracy 0.6900 fails value threshold >= 0.7000" in failed[0].message


def test_value_threshold_lower_is_better_for_log_loss_by_default():
    rules = {"log_loss": Threshold(value=0.5)}
    assert _passed(judge(rules, {"log_loss": 0.4}, None))
    assert not _passed(judge(rules, {"log_loss": 0.6}, None))
    # An explicit direction wins over the metric's default.
    assert _passed(judge({"log_loss": Threshold(value=0.5, direction="higher")}, {"log_loss": 0.6}, None))


def test_absolute_change_allows_a_bounded_regression():
    rules = {"accuracy": Threshold(change_abs=-0.02)}
    assert _passed(judge(rules, {"accuracy": 0.79}, {"accuracy": 0.80}))
    checks = judge(rules, {"accuracy": 0.77}, {"accuracy": 0.80})
    assert not _passed(checks)
    assert "improvement -0.0300 < allowed change -0.0200" in checks[0].message


def test_absolute_change_can_demand_an_improvement():
    rules = {"macro_f1": Threshold(change_abs=0.01)}
    assert not _passed(judge(rules, {"macro_f1": 0.805}, {"macro_f1": 0.80}))
    assert _passed(judge(rules, {"macro_f1": 0.82}, {"macro_f1": 0.80}))


def test_relative_change_in_the_lower_is_better_direction():
    rules = {"log_loss": Threshold(change_rel=-0.05, direction="lower")}
    # 0.50 -> 0.52 is a 4% regression: allowed; 0.50 -> 0.54 is 8%: not.
    assert _passed(judge(rules, {"log_loss": 0.52}, {"log_loss": 0.50}))
    checks = judge(rules, {"log_loss": 0.54}, {"log_loss": 0.50})
    assert not _passed(checks) and checks[0].kind == "change_rel"
    # Lower log loss is an improvement.
    assert _passed(judge({"log_loss": Threshold(change_rel=0.05)}, {"log_loss": 0.40}, {"log_loss": 0.50}))


def test_first_model_is_judged_on_value_thresholds_alone():
    rules = {"accuracy": Threshold(value=0.5, change_abs=0.5)}
    checks = judge(rules, {"accuracy": 0.6}, None)
    assert [c.kind for c in checks] == ["value"] and _passed(checks)


def test_missing_metric_fails_instead_of_passing():
    checks = judge({"roc_auc": Threshold(value=0.5)}, {"accuracy": 0.9}, None)
    assert not _passed(checks)


def test_change_check_reports_whether_the_difference_is_within_noise():
    from components.evaluation.metrics import Interval

    rules = {"accuracy": Threshold(change_abs=-0.01)}
    noisy = judge(
        rules, {"accuracy": 0.78}, {"accuracy": 0.80}, differences={"accuracy": Interval(-0.02, -0.05, 0.01)}
    )
    assert "within noise" in noisy[0].message
    real = judge(
        rules, {"accuracy": 0.70}, {"accuracy": 0.80}, differences={"accuracy": Interval(-0.1, -0.13, -0.07)}
    )
    assert "beyond noise" in real[0].message


def test_threshold_config_validation_and_set_override():
    with pytest.raises(ConfigError, match="at least one of value"):
        Threshold(direction="lower")
    with pytest.raises(ConfigError, match="unknown metric"):
        EvaluationConfig(thresholds={"f2": Threshold(value=1)})
    cfg = load_config(
        None, ["evaluate.thresholds.accuracy.value=0.7", "evaluate.thresholds.log_loss.change_rel=-0.1"]
    )
    assert cfg.evaluate.thresholds["accuracy"].value == 0.7
    assert cfg.evaluate.thresholds["log_loss"].change_rel == -0.1
    assert Config.from_json(cfg.to_json()).evaluate.thresholds == cfg.evaluate.thresholds


def _slice_case(n_per_region: int = 100):
    regions = np.repeat(["north", "south"], n_per_region)
    frame = pd.DataFrame({"region": regions, "tenure": np.arange(2 * n_per_region, dtype=float)})
    y = np.zeros(2 * n_per_region, dtype=int)
    champion = np.tile([0.8, 0.2], (2 * n_per_region, 1))
    candidate = champion.copy()
    # The candidate loses 20 points of accuracy on "north" only; overall it drops 10 points.
    candidate[: n_per_region // 5] = [0.2, 0.8]
    return frame, y, candidate, champion


def test_a_regressing_slice_blocks_and_is_named():
    frame, y, candidate, champion = _slice_case()
    config = Config()
    config.evaluate.slices = ["region"]
    config.evaluate.slice_thresholds = {"accuracy": Threshold(change_abs=-0.05)}
    rows, checks = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=["tenure"])
    blocking = [r["slice"] for r in rows if r["blocking"]]
    assert blocking == ["region=north"]
    assert any("slice region=north" in c.message and not c.passed for c in checks)


def test_slice_rules_default_to_the_overall_change_rules_and_small_slices_do_not_block():
    frame, y, candidate, champion = _slice_case()
    config = Config()
    config.evaluate.slices = ["region", "tenure"]
    rows, _ = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=["tenure"])
    assert {r["slice"] for r in rows if r["blocking"]} == {"region=north", "tenure=(-0.001, 49.75]"}
    config.evaluate.slice_min_rows = 1000
    rows, checks = evaluate_slices(frame, y, candidate, champion, config, numeric_columns=["tenure"])
    assert not any(r["blocking"] for r in rows) and not checks
