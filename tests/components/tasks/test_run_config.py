"""A task's own config defaults (``Task.config_defaults``, ``load_run_config``): over ctpipe's defaults,
under the user's file and --set.

Before: ``--set task.name=causal_lm`` on the user's own texts kept the tabular defaults (select.metric
val_accuracy, blessing on accuracy and log_loss), so the run could never pass; the user had to know and
repeat the task's metric settings.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from ctpipe.components.lib.config import load_config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.tasks import check_evaluation_metrics, load_task
from ctpipe.components.tasks.run_config import load_run_config


def test_a_built_in_task_brings_its_metric_settings():
    config = load_run_config(None, ["task.name=causal_lm"])
    assert config.select.metric == "val_loss"
    assert set(config.evaluate.thresholds) == {"loss", "bits_per_byte"}
    assert config.registry.model_name == "ctpipe-causal-lm"
    check_evaluation_metrics(load_task(config.task), config.evaluate)  # the first step accepts it


def test_the_user_file_and_set_win_over_the_task_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: {name: causal_lm}\nregistry: {model_name: my-lm}\n"
                    "evaluate: {thresholds: {bits_per_byte: {value: baseline, direction: lower}}}\n")
    config = load_run_config(path, ["select.metric=val_bits_per_byte", "select.mode=min"])
    assert config.select.metric == "val_bits_per_byte"
    assert config.registry.model_name == "my-lm"
    assert set(config.evaluate.thresholds) == {"bits_per_byte"}  # a whole map given replaces the task's
    # One key of a rule merges into the task's rule, as into ctpipe's default ones.
    merged = load_run_config(None, ["task.name=causal_lm", "evaluate.thresholds.loss.change_abs=0.01"])
    assert merged.evaluate.thresholds["loss"].change_abs == 0.01
    assert set(merged.evaluate.thresholds) == {"loss", "bits_per_byte"}


def test_the_default_task_keeps_ctpipe_defaults():
    config = load_run_config(None, [])
    assert config.select.metric == "val_accuracy"
    assert set(config.evaluate.thresholds) == {"accuracy", "log_loss"}


def test_a_user_task_declares_its_defaults(tmp_path, monkeypatch):
    (tmp_path / "my_defaults_task.py").write_text(textwrap.dedent("""
        from ctpipe.components.tasks.tabular import TabularClassification

        class MyTask(TabularClassification):
            config_defaults = ("select.metric=val_loss", "registry.model_name=my-model")

        def make():
            return MyTask()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_run_config(None, ["task.entrypoint=my_defaults_task:make"])
    assert (config.select.metric, config.registry.model_name) == ("val_loss", "my-model")
    sys.modules.pop("my_defaults_task", None)


def test_an_unimportable_user_task_loads_the_config_without_its_defaults():
    # `ctpipe compile` on a CI runner without the user's package: the steps (which import it) check the task.
    config = load_run_config(None, ["task.entrypoint=not_installed_pkg.tasks:make"])
    assert config.select.metric == "val_accuracy"


@pytest.mark.parametrize("bad", [["select.metric"], "select.metric=val_loss", [3]])
def test_bad_config_defaults_are_a_clear_task_error(bad):
    from ctpipe.components.tasks import TaskError, complete_task
    from ctpipe.components.tasks.tabular import TabularClassification

    task = TabularClassification()
    task.config_defaults = bad
    with pytest.raises(TaskError, match="config_defaults"):
        complete_task(task, "a test task")


def test_a_cluster_pipeline_for_a_task_gets_the_task_and_the_cluster_defaults():
    from ctpipe.pipelines.cluster_config import load_cluster_config

    config = load_cluster_config(None, ["task.name=causal_lm"])
    assert (config.train.backend, config.select.metric) == ("auto", "val_loss")
    assert set(config.evaluate.thresholds) == {"loss", "bits_per_byte"}


def test_default_layers_apply_in_order_and_a_whole_map_replaces():
    layers = [{"select": {"metric": "val_loss"}, "evaluate": {"thresholds": {"loss": {"value": 1.0}}}},
              {"select": {"metric": "val_f1"}, "evaluate": {"thresholds": {"f1": {"value": 0.5}}}}]
    config = load_config(None, ["select.mode=max"], defaults=layers)
    assert config.select.metric == "val_f1" and set(config.evaluate.thresholds) == {"f1"}


def test_settings_layers_apply_as_set_does():
    # A key inside a map merges into it (as --set evaluate.thresholds.accuracy.value=0.9 does); a whole map
    # given as one setting replaces it.
    merged = load_config(None, [], defaults=[["evaluate.thresholds.accuracy.value=0.9"]])
    assert set(merged.evaluate.thresholds) == {"accuracy", "log_loss"}
    assert merged.evaluate.thresholds["accuracy"].value == 0.9
    replaced = load_config(None, [], defaults=[["evaluate.thresholds={log_loss: {value: baseline}}"]])
    assert set(replaced.evaluate.thresholds) == {"log_loss"}
    with pytest.raises(ConfigError, match="unknown config key 'train.max_stepz'"):
        load_config(None, [], defaults=[["train.max_stepz=3"]])
