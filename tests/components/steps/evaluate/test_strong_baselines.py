"""Issue 48's evaluation: a linear baseline beside the trivial one (and a first model held to it), per-class recall
with a warning for a class never predicted, and absolute floors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.stats import binom

from ctpipe.components.lib.config import Config, Threshold
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.evaluate.judgement import judge_candidate
from ctpipe.components.steps.evaluate.linear_baseline import fit_linear_baseline
from ctpipe.components.steps.evaluate.per_class import never_predicted, per_class
from ctpipe.components.tasks import load_task
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


def _probs(pred: np.ndarray, confidence: float, classes: int) -> np.ndarray:
    p = np.full((len(pred), classes), (1 - confidence) / (classes - 1))
    p[np.arange(len(pred)), pred] = confidence
    return p


def _model(rng, y, classes, accuracy, conf=0.8):
    right = rng.random(len(y)) < accuracy
    return _probs(np.where(right, y, (y + rng.integers(1, classes, len(y))) % classes), conf, classes)


def _first_model(y, candidate, linear, config=None):
    config = config or Config()
    config.evaluate.thresholds = {"accuracy": Threshold(value="baseline", change_abs=0.0),
                                  "log_loss": Threshold(value="baseline", change_abs=0.0),
                                  "macro_f1": Threshold(value="baseline")}
    return judge_candidate(y, candidate, None, config, pd.DataFrame(index=range(len(y))), [], linear=linear,
                           linear_name="logistic regression")


# --- the linear baseline itself -------------------------------------------------------------------------------


def _spec_frames(rows: int, seed: int):
    from ctpipe.components.lib.data.demo import generate_day

    frame = generate_day(0, rows, seed, False, 0)
    frame["y"] = 3.0 * frame["satisfaction"] - 0.05 * frame["tenure_months"] + np.random.default_rng(seed).normal(0, 0.5, rows)
    return frame


def test_ridge_regression_is_fitted_on_the_encoded_features_and_scored_through_predict():
    from ctpipe.components.lib.data.snapshot import infer_schema

    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    train, val, test = _spec_frames(2000, 0), _spec_frames(400, 1), _spec_frames(400, 2)
    schema = infer_schema(train.drop(columns=["label"]), label="y", key="customer_id", features=[], categorical=[],
                          label_kind="continuous")
    state = task.codec.fit(train, schema)
    linear, why = fit_linear_baseline(task, state, iter([train]), iter([val]), (8, 1))
    assert linear is not None and linear.name == "ridge regression", why
    assert "fitted on 2000 train rows, L2 penalty" in linear.detail and "chosen on 400 val rows" in linear.detail
    predicted = task.scoring.predict(linear.model, test, state, state)
    rmse = float(np.sqrt(np.mean((predicted - test["y"]) ** 2)))
    assert rmse < 0.6  # the noise is 0.5: the linear truth is found (the mean predictor's RMSE is ~3)


def test_logistic_regression_predicts_classes_through_the_tasks_own_predict(tmp_path):
    from ctpipe.components.lib.data.snapshot import load_snapshot

    snap = load_snapshot(make_snapshot(tmp_path))
    task = load_task({"name": "tabular_classification", "entrypoint": None, "options": {}})
    linear, _ = fit_linear_baseline(task, snap.state, snap.batches("train"), snap.batches("val"),
                                    (2, len(snap.state["classes"])))
    test = snap.frame("test")
    probabilities = task.scoring.predict(linear.model, test, snap.state, snap.state)
    accuracy = float((probabilities.argmax(1) == task.codec.targets(test, snap.state)).mean())
    assert linear.name == "logistic regression" and np.allclose(probabilities.sum(1), 1.0)
    assert accuracy > 0.6  # the demo's label is non-linear: a linear model does well, not perfectly


def test_no_linear_baseline_for_a_sequence_task():
    task = load_task({"name": "causal_lm", "entrypoint": None, "options": {}})
    linear, why = fit_linear_baseline(task, {}, iter(()), iter(()), ())
    assert linear is None and why == "no linear baseline: the task's examples are not one per row"


# --- the first model held to it ---------------------------------------------------------------------------------


def test_a_first_model_that_trades_its_rare_classes_away_loses_to_the_linear_baseline():
    rng = np.random.default_rng(0)
    y = rng.choice(4, 3000, p=[0.55, 0.3, 0.1, 0.05])
    linear = _model(rng, y, 4, 0.85)
    # Frequency-weighted loss: right on the common classes, the two rare ones almost never predicted.
    pred = np.where(y < 2, np.where(rng.random(len(y)) < 0.9, y, 1 - y), rng.integers(0, 2, len(y)))
    judgement = _first_model(y, _probs(pred, 0.8, 4), linear)
    failed = [c for c in judgement.checks if not c.passed]
    assert not judgement.passed and {c.metric for c in failed} >= {"macro_f1"}
    (macro,) = [c for c in failed if c.metric == "macro_f1"]
    assert macro.kind == "beat_linear" and macro.message.startswith("macro_f1 ")
    assert "vs logistic regression's" in macro.message and "loses clearly to the linear baseline" in macro.message


def test_the_linear_rule_is_for_first_models_and_can_be_switched_off():
    rng = np.random.default_rng(1)
    y = rng.choice(3, 2000, p=[0.5, 0.3, 0.2])
    linear, worse = _model(rng, y, 3, 0.9), _model(rng, y, 3, 0.7)
    assert not _first_model(y, worse, linear).passed
    off = Config()
    off.evaluate.beat_linear = False
    assert _first_model(y, worse, linear, off).passed
    config = Config()
    with_champion = judge_candidate(y, worse, worse, config, pd.DataFrame(index=range(len(y))), [], linear=linear)
    assert not any(c.kind == "beat_linear" for c in with_champion.checks)


def test_a_candidate_as_good_as_the_linear_model_is_not_blocked_by_chance():
    # Equal quality: the rule blocks only when the whole interval lies below -2 % of the linear model's value,
    # so an equal candidate is blocked far less often than the 2.5 % a one-sided 95 % test allows per metric;
    # over 200 draws at most binom.ppf(0.999, 200, 0.025) = 13 blocks pass (a margin that holds on any CPU:
    # the draws are seeded numpy, no training).
    rng = np.random.default_rng(2)
    blocks = 0
    for _ in range(200):
        y = rng.choice(3, 1500, p=[0.5, 0.3, 0.2])
        blocks += not _first_model(y, _model(rng, y, 3, 0.8), _model(rng, y, 3, 0.8)).passed
    assert blocks <= binom.ppf(0.999, 200, 0.025), blocks


# --- floors and per-class figures ----------------------------------------------------------------------------------


def test_an_absolute_floor_blocks_a_model_below_it():
    rng = np.random.default_rng(3)
    y = rng.choice(2, 2000, p=[0.6, 0.4])
    config = Config()
    config.evaluate.floors = {"accuracy": 0.95, "log_loss": 0.9}
    judgement = judge_candidate(y, _model(rng, y, 2, 0.85), None, config, pd.DataFrame(index=range(len(y))), [])
    floors = {c.metric: c for c in judgement.checks if c.kind == "floor"}
    assert not judgement.passed and not floors["accuracy"].passed and floors["log_loss"].passed
    assert floors["accuracy"].message.startswith("accuracy 0.85") and \
        "fails the floor evaluate.floors.accuracy = >= 0.95" in floors["accuracy"].message
    assert "meets the floor evaluate.floors.log_loss = <= 0.9" in floors["log_loss"].message


def test_floors_name_a_metric_of_the_task():
    from ctpipe.components.lib.errors import ConfigError
    from ctpipe.components.tasks.registry import check_evaluation_metrics

    with pytest.raises(ConfigError, match="'evaluate.floors.rmse': task 'tabular_classification' computes no metric"):
        check_evaluation_metrics(load_task({"name": "tabular_classification", "entrypoint": None, "options": {}}),
                                 Config.from_dict({"evaluate": {"floors": {"rmse": 3.0}}}).evaluate)
    with pytest.raises(ConfigError, match="evaluate.floors.accuracy"):
        Config.from_dict({"evaluate": {"floors": {"accuracy": "high"}}})


def test_a_class_with_test_rows_that_is_never_predicted_is_a_warning():
    figures = per_class(np.array([[50, 0, 0], [5, 40, 0], [20, 10, 0]]), ["a", "b", "c"])
    assert figures[2] == {"class": "c", "test_rows": 30, "predicted_rows": 0, "recall": 0.0, "precision": None}
    (warning,) = never_predicted(figures)
    assert warning.startswith("class 'c' has 30 test rows and the candidate predicts it for none of them")
    assert never_predicted(per_class(np.array([[50, 0], [10, 0]]), ["a", "b"])) == []  # 10 rows: too few to say


def test_the_blessing_and_card_carry_the_linear_baseline_and_each_class(tmp_path):
    snap = make_snapshot(tmp_path / "world")
    good = make_model(snap, tmp_path / "good.pt", steps=80, seed=0)
    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    result = evaluate_candidate(str(good), str(snap), config, tracking_uri=uri, mlflow_run_id=make_run(uri, config),
                                blessing_path=str(tmp_path / "blessing.json"), card_path=str(tmp_path / "card.md"))
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    assert blessing["linear_name"] == "logistic regression" and set(blessing["linear_metrics"]) >= {"accuracy"}
    assert set(blessing["linear_differences"]["accuracy"]) >= {"low", "high"}
    assert [f["class"] for f in blessing["per_class"]] == result.class_names
    assert any(r.startswith("logistic regression on the candidate's") for r in result.reasons)
    card = (tmp_path / "card.md").read_text()
    assert "### Per class (candidate)" in card and "| linear | cand − linear" in card
