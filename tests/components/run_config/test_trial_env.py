"""A trial's values as KUBEFLOW_TRAINER_OPT_<NAME> variables (the OptimizationJob contract), and back into a config."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import ConfigError
from ctpipe.components.run_config import resolve_config
from ctpipe.components.run_config.trial import (
    apply_trial_env,
    env_name,
    parameter_name,
    trial_config,
    trial_env,
)

SPACE = ('tune.space={train.lr: "log_uniform(1e-6, 1e-1)", train.weight_decay: "uniform(0, 0.1)", '
         'task.options.width: "choice(32, 64)", model.kind: "choice(mlp, transformer)"}')


@pytest.fixture(scope="module")
def config():
    return resolve_config(settings=["tune.trials=4", SPACE])


def test_names_follow_the_optimization_job_contract():
    assert parameter_name("train.weight_decay") == "train_weight_decay"
    assert env_name("train.lr") == "KUBEFLOW_TRAINER_OPT_TRAIN_LR"
    assert env_name("task.options.width") == "KUBEFLOW_TRAINER_OPT_TASK_OPTIONS_WIDTH"


def test_values_come_back_exactly_from_their_variables(config):
    values = {"train.lr": 1.2345678901234e-05, "train.weight_decay": 0.0, "task.options.width": 64, "model.kind": "transformer"}
    env = trial_env(values)
    assert env["KUBEFLOW_TRAINER_OPT_TRAIN_LR"] == "1.2345678901234e-05"
    trial = apply_trial_env(config, {"PATH": "/bin", **env})
    assert (trial.train.lr, trial.train.weight_decay, trial.task.options, trial.model.kind) == (
        1.2345678901234e-05, 0.0, {"width": 64}, "transformer")
    # The same as resolving the values as overrides, which is how the tune step checks every trial.
    assert trial == trial_config(config, values)


def test_no_variables_leave_the_config_as_it_is(config):
    assert apply_trial_env(config, {"PATH": "/bin"}) is config


def test_a_variable_the_space_does_not_name_is_refused(config):
    with pytest.raises(ConfigError, match="KUBEFLOW_TRAINER_OPT_TRAIN_SEED.*names no key of tune.space.*TRAIN_LR"):
        apply_trial_env(config, {"KUBEFLOW_TRAINER_OPT_TRAIN_SEED": "7"})


def test_a_value_that_breaks_a_rule_is_refused_naming_the_setting(config):
    with pytest.raises(ConfigError, match="train.lr"):
        apply_trial_env(config, {"KUBEFLOW_TRAINER_OPT_TRAIN_LR": "12"})


def test_a_run_cannot_add_the_tune_step_a_pipeline_was_compiled_without():
    compiled = resolve_config().to_json()
    with pytest.raises(ConfigError, match="compiled without a tune step"):
        resolve_config(compiled=compiled, overrides=["tune.trials=8"])
    with_tune = resolve_config(settings=["tune.trials=8"]).to_json()
    assert resolve_config(compiled=with_tune, overrides=["tune.trials=0"]).tune.trials == 0
