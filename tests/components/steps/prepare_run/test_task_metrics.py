"""Blessing rules name the run's task's metrics: a user's own metric can be gated, a metric the task
never computes stops the run in its first step, naming the task's metrics."""

from __future__ import annotations

import sys
import textwrap

import pytest

from ctpipe.components.lib.config import ConfigError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.prepare_run.prepare import prepare_run
from ctpipe.components.tasks.registry import _CACHE

REGRESSION_TASK = """
    from ctpipe.components.tasks import Metric, SanitySpec
    class Regression:
        name = "regression"
        metrics = (Metric("mse", False), Metric("r2", True))
        sanity = SanitySpec()
    for part in ("fit", "encode", "build_model", "shard_units", "loss", "row_losses", "row_metrics",
                 "init_losses", "targets", "predict", "compute_metrics", "serve"):
        setattr(Regression, part, lambda self, *a, **k: None)
    def make_task():
        return Regression()
"""


@pytest.fixture
def regression_task(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "user_regression_task.py").write_text(textwrap.dedent(REGRESSION_TASK))
    yield "task.entrypoint=user_regression_task:make_task"
    sys.modules.pop("user_regression_task", None)
    _CACHE.clear()


def _prepare(tmp_path, *overrides: str):
    """The first step of a run configured as ``ctpipe run --set ...`` configures it."""
    # No data root here: without the cache, the first step does not fingerprint one.
    overrides = (*overrides, "pipeline.caching=false")
    return prepare_run(load_config(None, list(overrides)).to_json(), "", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                       pipeline_run_id="p1", trigger="manual", data_uri=str(tmp_path / "data"))


def test_a_user_task_is_gated_on_its_own_metrics(tmp_path, regression_task):
    rules = "evaluate.thresholds={r2: {value: 0.5}, mse: {change_rel: 0.0}}"
    config = load_config(None, [regression_task, rules])
    assert set(config.evaluate.thresholds) == {"r2", "mse"}
    prepared = _prepare(tmp_path, regression_task, rules)
    assert prepared.mlflow_run_id


def test_a_rule_on_a_metric_the_task_does_not_compute_stops_the_first_step(tmp_path):
    with pytest.raises(ConfigError) as err:
        _prepare(tmp_path, "evaluate.thresholds.bits_per_byte.value=1.0")
    message = str(err.value)
    assert "evaluate.thresholds.bits_per_byte" in message and "tabular_classification" in message
    assert "accuracy, macro_f1, log_loss, roc_auc" in message
    assert not (tmp_path / "mlflow.db").exists()  # before any work


def test_the_default_rules_on_a_task_without_those_metrics_name_the_fix(tmp_path, regression_task):
    with pytest.raises(ConfigError, match=r"evaluate.thresholds.accuracy.*mse, r2.*evaluate.thresholds"):
        _prepare(tmp_path, regression_task)


def test_slice_rules_are_checked_the_same_way(tmp_path):
    with pytest.raises(ConfigError, match="evaluate.slice_thresholds.mse"):
        _prepare(tmp_path, "evaluate.slice_thresholds.mse.change_abs=0.0")


def test_a_metric_name_that_cannot_be_one_is_refused_by_the_config():
    with pytest.raises(ConfigError, match="evaluate.thresholds"):
        load_config(None, ["evaluate.thresholds={'top 2': {value: 0.5}}"])
