"""The run's config: the compiled config with the run's overrides (the KFP UI's config_overrides)."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config, resolve_config


def test_run_overrides_apply_on_top_of_the_compiled_config():
    compiled = load_config(None, ["train.backend=pytorchjob", "train.max_steps=50"]).to_json()
    config = resolve_config(compiled=compiled, overrides="train.max_steps=70; train.lr=0.01")
    assert (config.train.max_steps, config.train.lr, config.train.backend) == (70, 0.01, "pytorchjob")


def test_a_cluster_pipeline_refuses_a_run_override_to_the_local_backend():
    compiled = load_config(None, ["train.backend=pytorchjob"]).to_json()
    with pytest.raises(ConfigError, match=r"train\.backend=local.*compiled for a cluster.*pytorchjob"):
        resolve_config(compiled=compiled, overrides="train.backend=local")


def test_a_local_pipeline_keeps_its_local_backend():
    compiled = load_config(None, []).to_json()
    assert resolve_config(compiled=compiled, overrides="train.max_steps=500").train.backend == "local"


def _compiled_for(*settings: str) -> str:
    return load_config(None, list(settings)).to_json()


def test_a_run_that_switches_to_the_language_model_task_gets_that_tasks_defaults():
    """Before: the compiled tabular defaults stayed (select.metric=val_accuracy, accuracy/log_loss blessing
    rules, the classifier's model name): prepare then refused its own defaults for the new task."""
    compiled = _compiled_for("train.max_steps=50", "registry.experiment=team-a")
    config = resolve_config(compiled=compiled, overrides="task.name=causal_lm; data.text_column=body")
    assert config.select.metric == "val_loss" and config.registry.model_name == "ctpipe-causal-lm"
    assert set(config.evaluate.thresholds) == {"loss", "bits_per_byte"}
    # The compiled user's own settings and the run's overrides stay.
    assert (config.train.max_steps, config.registry.experiment, config.data.text_column) == (50, "team-a", "body")


def test_a_run_back_to_the_tabular_task_drops_the_language_models_defaults_but_not_the_users():
    compiled = _compiled_for("task.name=causal_lm", "registry.model_name=team-lm")
    config = resolve_config(compiled=compiled, overrides="task.name=tabular_classification")
    assert config.select.metric == "val_accuracy" and set(config.evaluate.thresholds) == {"accuracy", "log_loss", "macro_f1"}
    assert config.registry.model_name == "team-lm"  # the user's choice, not the task's default


def test_run_overrides_apply_as_set_does_a_whole_mapping_replaces():
    compiled = load_config(None, []).to_json()
    assert resolve_config(compiled=compiled, overrides="evaluate.thresholds={}").evaluate.thresholds == {}
    kept = resolve_config(compiled=compiled, overrides="evaluate.thresholds.accuracy.value=0.7").evaluate.thresholds
    assert kept["accuracy"].value == 0.7 and "log_loss" in kept
