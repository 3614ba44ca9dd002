"""The built-in tabular_regression task: label-unit metrics, the mean predictor, the paired bootstrap of the
squared and absolute errors, the loss at init against the label's variance, and what it serves."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import infer_schema
from ctpipe.components.lib.metrics import resample_weights
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.regression import paired_regression_bootstrap, regression_metrics


def frame(rows: int = 300, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=rows)
    colour = rng.choice(["red", "blue"], rows)
    y = 50.0 + 20.0 * x + 5.0 * (colour == "red") + rng.normal(0, 2.0, rows)
    return pd.DataFrame({"x": x, "colour": colour, "y": y})


@pytest.fixture()
def task_and_state():
    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    data = frame()
    schema = infer_schema(data, label="y", key=None, features=[], categorical=[], label_kind=task.codec.label_kind)
    return task, data, schema, task.codec.fit(data, schema)


def test_the_schema_of_a_continuous_label_has_no_classes(task_and_state):
    _, _, schema, state = task_and_state
    assert schema.label == "y" and schema.classes == [] and state["classes"] == []


def test_metrics_match_scikit_learn():
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    rng = np.random.default_rng(1)
    y, p = rng.normal(10, 3, 200), rng.normal(10, 3, 200)
    got = regression_metrics(y, p)
    assert got["rmse"] == pytest.approx(np.sqrt(mean_squared_error(y, p)))
    assert got["mae"] == pytest.approx(mean_absolute_error(y, p))
    assert got["r2"] == pytest.approx(r2_score(y, p))


def test_paired_bootstrap_scores_each_resample_as_the_metrics_of_its_rows():
    rng = np.random.default_rng(2)
    y = rng.normal(0, 1, 50)
    models = {"candidate": y + rng.normal(0, 0.5, 50), "baseline": np.zeros(50)}
    draws = paired_regression_bootstrap(y, models, samples=5, seed=7)
    weights = next(resample_weights(len(y), 5, 7))
    for i, w in enumerate(weights):
        rows = np.repeat(np.arange(len(y)), w.astype(int))  # the i-th resample, row by row
        for name, p in models.items():
            expected = regression_metrics(y[rows], p[rows])
            for metric, value in expected.items():
                assert draws[name][metric][i] == pytest.approx(value), (name, metric)


def test_baseline_is_the_train_mean_and_a_trained_model_is_scored_in_label_units(task_and_state):
    task, data, schema, state = task_and_state
    y = task.codec.targets(data, state)
    baseline = task.scoring.baseline(y, state)
    assert np.allclose(baseline, data["y"].mean())
    assert task.scoring.compute_metrics(y, baseline)["r2"] == pytest.approx(0.0, abs=1e-12)
    torch.manual_seed(0)
    model = task.model.build(Config.from_dict({"model": {"hidden": 16, "depth": 1}}), state)
    batch = task.codec.encode(data, state)
    task.model.init(model, state, batch.targets)
    optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(200):
        optimiser.zero_grad()
        task.objective.loss(model(*batch.inputs), batch.targets).backward()
        optimiser.step()
    predictions = task.scoring.predict(model, data, state, state)
    assert predictions.shape == (len(data),)
    metrics = task.scoring.compute_metrics(y, predictions)
    assert metrics["rmse"] < 0.3 * task.scoring.compute_metrics(y, baseline)["rmse"] and metrics["r2"] > 0.9
    served = task.serving.serve(model, data.drop(columns=["y"]), state)
    assert list(served.columns) == ["prediction"] and np.allclose(served["prediction"], predictions)


def test_loss_at_init_with_the_output_at_the_mean_is_the_label_variance(task_and_state):
    task, data, schema, state = task_and_state
    targets = task.codec.encode(data, state).targets
    expectations = {e.name: e for e in task.checks.init_losses(targets, state, 0.1)}
    mean = expectations["init_loss_mean"]
    # On the train rows the standardised label has variance 1 (population std), so the MSE at the mean is 1.
    assert mean.expected == pytest.approx(1.0, rel=1e-5)
    model = task.model.build(Config(), state)
    mean.initialise(model)
    with torch.no_grad():
        loss = float(task.objective.loss(model(*task.codec.encode(data, state).inputs), targets))
    assert loss == pytest.approx(mean.expected, abs=mean.tolerance)


def test_huber_is_an_option_and_a_bad_loss_names_the_option():
    huber = load_task({"name": "tabular_regression", "entrypoint": None, "options": {"loss": "huber"}})
    outputs, targets = torch.tensor([[0.0], [3.0]]), torch.tensor([0.0, 0.0])
    assert huber.objective.row_losses(outputs, targets).tolist() == pytest.approx([0.0, 2.5])
    from ctpipe.components.tasks.registry import TaskError

    with pytest.raises(TaskError, match="task.options.loss must be 'mse' or 'huber'"):
        load_task({"name": "tabular_regression", "entrypoint": None, "options": {"loss": "l1"}})


def test_a_non_numeric_label_is_named(task_and_state):
    task, data, _, state = task_and_state
    bad = data.assign(y=data["y"].astype(object))
    bad.loc[3, "y"] = "n/a"
    from ctpipe.components.lib.errors import DataValidationError

    with pytest.raises(DataValidationError, match="label column 'y' holds non-numeric value"):
        task.codec.targets(bad, state)


def test_slices_of_a_regression_are_judged_against_the_mean_predictor(task_and_state):
    from ctpipe.components.steps.evaluate.judgement import judge_candidate

    task, data, schema, state = task_and_state
    y = task.codec.targets(data, state)
    # A candidate that is right on the red rows and no better than the mean on the blue ones.
    candidate = np.where(data["colour"] == "red", y, data["y"].mean())
    config = Config.from_dict({"task": {"name": "tabular_regression"},
                               "evaluate": {"slices": ["colour"], "slice_min_rows": 20, "bootstrap_samples": 200,
                                            "thresholds": {"rmse": {"value": "baseline"}},
                                            "slice_thresholds": {"rmse": {"value": "baseline"}}}})
    judgement = judge_candidate(y, candidate, None, config, data, schema.numeric, scorer=task.scoring,
                                baseline=task.scoring.baseline(y, state))
    by_slice = {s["slice"]: s for s in judgement.slices}
    assert set(by_slice) == {"colour=red", "colour=blue"}
    failed = [c for c in judgement.checks if not c.passed]
    assert failed and all("colour=blue" in c.message and "the mean predictor" in c.message for c in failed)
    assert not judgement.passed
