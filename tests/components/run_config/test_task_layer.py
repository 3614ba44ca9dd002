"""A task's own config defaults (``Task.config_defaults``, the resolver's ``task`` layer): over ctpipe's
defaults, under the user's file and --set.

Before: ``--set task.name=causal_lm`` on the user's own texts kept the tabular defaults (select.metric
val_accuracy, blessing on accuracy and log_loss), so the run could never pass; the user had to know and
repeat the task's metric settings.
"""

from __future__ import annotations

import sys
import textwrap

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config, resolve_config, resolve_layers
from ctpipe.components.tasks import check_evaluation_metrics, load_task


def test_a_built_in_task_brings_its_metric_settings():
    config = load_config(None, ["task.name=causal_lm"])
    assert config.select.metric == "val_loss"
    assert set(config.evaluate.thresholds) == {"loss", "bits_per_byte"}
    assert config.registry.model_name == "ctpipe-causal-lm"
    check_evaluation_metrics(load_task(config.task), config.evaluate)  # the first step accepts it


def test_the_user_file_and_set_win_over_the_task_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("task: {name: causal_lm}\nregistry: {model_name: my-lm}\n"
                    "evaluate: {thresholds: {bits_per_byte: {value: baseline, direction: lower}}}\n")
    config = load_config(path, ["select.metric=val_bits_per_byte", "select.mode=min"])
    assert config.select.metric == "val_bits_per_byte"
    assert config.registry.model_name == "my-lm"
    assert set(config.evaluate.thresholds) == {"bits_per_byte"}  # a whole map given replaces the task's
    # One key of a rule merges into the task's rule, as into ctpipe's default ones.
    merged = load_config(None, ["task.name=causal_lm", "evaluate.thresholds.loss.change_abs=0.01"])
    assert merged.evaluate.thresholds["loss"].change_abs == 0.01
    assert set(merged.evaluate.thresholds) == {"loss", "bits_per_byte"}


def test_the_default_task_brings_the_classification_familys_defaults():
    config = load_config(None, [])
    assert config.select.metric == "val_accuracy"
    assert set(config.evaluate.thresholds) == {"accuracy", "log_loss", "macro_f1"}
    assert config.evaluate.thresholds["macro_f1"].value == "baseline" and config.evaluate.thresholds["macro_f1"].change_abs is None
    assert load_config(None, ["evaluate.thresholds={}"]).evaluate.thresholds == {}  # still the user's to replace


def test_a_user_task_declares_its_defaults(tmp_path, monkeypatch):
    (tmp_path / "my_defaults_task.py").write_text(textwrap.dedent("""
        from ctpipe.components.tasks.tabular import TabularClassification

        class MyTask(TabularClassification):
            config_defaults = ("select.metric=val_loss", "registry.model_name=my-model")

        def make():
            return MyTask()
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config(None, ["task.entrypoint=my_defaults_task:make"])
    assert (config.select.metric, config.registry.model_name) == ("val_loss", "my-model")
    sys.modules.pop("my_defaults_task", None)


def test_an_unimportable_user_task_loads_the_config_without_its_defaults():
    # `ctpipe compile` on a CI runner without the user's package: the steps (which import it) check the task.
    config = load_config(None, ["task.entrypoint=not_installed_pkg.tasks:make"])
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
    config = resolve_config(settings=["task.name=causal_lm"], target="cluster")
    assert (config.train.backend, config.select.metric) == ("auto", "val_loss")
    assert set(config.evaluate.thresholds) == {"loss", "bits_per_byte"}


def test_the_layers_apply_in_their_documented_order(tmp_path):
    """defaults < task < cluster < demo < file < --set; each value says which layer set it."""
    path = tmp_path / "c.yaml"
    path.write_text("train: {max_steps: 40}\nregistry: {model_name: team-lm}\n")
    resolved = resolve_layers(file=path, settings=["train.max_steps=41", "evaluate.thresholds={}"],
                              target="cluster", demo=True)
    config = resolved.config
    assert config.train.max_steps == 41 and resolved.origin_of("train.max_steps") == "--set"
    assert config.registry.model_name == "team-lm" and resolved.origin_of("registry.model_name") == f"file {path}"
    assert config.train.backend == "auto" and resolved.origin_of("train.backend") == "cluster"
    assert config.data.key == "customer_id" and resolved.origin_of("data.key") == "demo"
    assert config.evaluate.thresholds == {} and resolved.origin_of("evaluate.thresholds") == "--set"
    assert resolved.origin_of("train.lr") == "defaults"
    lm = resolve_layers(settings=["task.name=causal_lm"])
    assert lm.origin_of("select.metric") == "task causal_lm" and lm.origin_of("task.name") == "--set"
    # A later layer wins over an earlier one that set the same value: the demo's key over nothing, --set over it.
    assert resolve_config(settings=["data.key=other_id"], demo=True).data.key == "other_id"


def test_a_whole_map_replaces_and_a_key_into_it_merges():
    # A key inside a map merges into it (as --set evaluate.thresholds.accuracy.value=0.9 does); a whole map
    # given as one setting replaces it.
    merged = load_config(None, ["evaluate.thresholds.accuracy.value=0.9"])
    assert set(merged.evaluate.thresholds) == {"accuracy", "log_loss", "macro_f1"}
    assert merged.evaluate.thresholds["accuracy"].value == 0.9
    replaced = load_config(None, ["evaluate.thresholds={log_loss: {value: baseline}}"])
    assert set(replaced.evaluate.thresholds) == {"log_loss"}
    with pytest.raises(ConfigError, match="unknown config key 'train.max_stepz'"):
        load_config(None, ["train.max_stepz=3"])


def test_a_task_that_needs_no_label_records_none_not_the_tabular_default():
    """Issue 47: causal_lm's recorded config carried the tabular `data.label: label`, which it never reads. Its task
    layer sets data.label to null (`ctpipe config show` names that layer); the tabular default stays, and a task
    that needs a label refuses a run without one before any step."""
    from ctpipe.components.tasks.registry import label_column

    resolved = resolve_layers(settings=["task.name=causal_lm"])
    assert resolved.config.data.label is None and resolved.origin_of("data.label") == "task causal_lm"
    assert resolved.config.model.kind is None and resolved.origin_of("model.kind") == "task causal_lm"
    assert load_config(None, []).data.label == "label"
    # A compiled causal_lm pipeline run as the tabular task gets the tabular default back.
    lm = load_config(None, ["task.name=causal_lm"]).to_json()
    back = resolve_config(compiled=lm, overrides="task.name=tabular_classification")
    assert (back.data.label, back.model.kind) == ("label", "mlp")
    tabular = load_config(None, ["data.label=null"])
    with pytest.raises(ConfigError, match="data.label"):
        label_column(load_task(tabular.task), tabular.data)


def test_a_tabular_model_of_no_kind_is_refused_naming_the_fix():
    from ctpipe.components.lib.config import ModelConfig
    from ctpipe.components.lib.models.tabular import InputSpec, build_model

    with pytest.raises(ConfigError, match="model.kind=mlp"):
        build_model(ModelConfig(kind=None), InputSpec(2, [], 2))
