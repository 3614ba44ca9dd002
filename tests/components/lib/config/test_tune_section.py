"""The ``tune`` section: off by default, a space of tunable keys in a mapping or a one-line text, refused by name."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config, ConfigError, SearchDimension
from ctpipe.components.run_config import resolve_config


def tune(**values):
    return Config.from_dict({"tune": values}).tune


def test_off_by_default_with_the_learning_rate_first_in_the_default_space():
    config = Config()
    assert config.tune.trials == 0
    assert list(config.tune.dimensions()) == ["train.lr", "train.weight_decay"]
    assert config.tune.dimensions()["train.lr"].log


def test_a_dimension_as_text_or_mapping_is_the_same_dimension():
    as_text = tune(trials=4, space={"train.lr": "log_uniform(1e-4, 1e-1)", "model.hidden": "choice(32, 64)"})
    as_mapping = tune(trials=4, space={"train.lr": {"kind": "log_uniform", "low": 1e-4, "high": 0.1},
                                       "model.hidden": {"kind": "choice", "values": [32, 64]}})
    assert as_text.space == as_mapping.space
    assert as_text.dimensions()["model.hidden"] == SearchDimension(kind="choice", values=[32, 64])
    # It travels between steps as JSON and comes back the same.
    assert Config.from_json(Config.from_dict({"tune": {"trials": 4, "space": as_text.space}}).to_json()).tune == as_text


def test_a_space_from_the_command_line_replaces_the_default_one():
    config = resolve_config(settings=["tune.trials=3", 'tune.space={task.options.width: "int(16, 64)"}'])
    assert list(config.tune.space) == ["task.options.width"]
    assert config.tune.dimensions()["task.options.width"].integer


@pytest.mark.parametrize(("space", "message"), [
    ({"train.workers": "int(1, 4)"}, "'train.workers' is not tunable"),
    ({"train.max_steps": "int(10, 40)"}, "tune.trial_steps"),
    ({"model.width": "int(1, 4)"}, "'model.width' is no model setting"),
    ({"data.val_fraction": "uniform(0.1, 0.2)"}, "cannot be searched"),
    ({"train.lr": "log_uniform(0, 0.1)"}, "a log range needs low > 0"),
    ({"train.lr": "uniform(0.1, 0.01)"}, "low < high"),
    ({"model.hidden": "int(16.5, 64)"}, "whole bounds"),
    ({"model.hidden": "choice(32, 32)"}, "repeats a value"),
    ({"train.lr": "normal(0, 1)"}, "is not a range"),
    ({"train.lr": {"kind": "uniform", "low": 0.1}}, "needs low and high"),
])
def test_a_bad_space_is_refused_naming_the_key(space, message):
    with pytest.raises(ConfigError, match="tune.space") as err:
        tune(trials=2, space=space)
    assert message in str(err.value)


def test_the_split_names_keys_of_the_space_and_fixed_keys_outside_it():
    config = tune(trials=2, space={"train.lr": "log_uniform(1e-4, 1e-1)", "model.hidden": "choice(32, 64)"},
                  scientific=["model.hidden"], fixed=["train.batch_size"])
    assert [config.role_of(k) for k in ("model.hidden", "train.lr", "train.batch_size")] == ["scientific", "nuisance", "fixed"]
    with pytest.raises(ConfigError, match="tune.scientific.*'model.depth' is not a key of tune.space"):
        tune(trials=2, scientific=["model.depth"])
    with pytest.raises(ConfigError, match="tune.fixed.*'train.lr' is searched"):
        tune(trials=2, fixed=["train.lr"])


def test_trials_need_a_space_and_budgets_have_bounds():
    with pytest.raises(ConfigError, match="tune.space.*needs a search space"):
        tune(trials=2, space={})
    with pytest.raises(ConfigError, match="tune.trials"):
        tune(trials=101)
    with pytest.raises(ConfigError, match="tune.trial_seconds"):
        tune(trial_seconds=5)
    assert tune(trials=8).failure_limit() == 2 and tune(trials=2).failure_limit() == 1
    assert tune(trials=8, max_failed_trials=0).failure_limit() == 0
