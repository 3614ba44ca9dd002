"""The run form's knobs over config_json: a knob changed in the form wins, one left at its default keeps the JSON."""

from __future__ import annotations

import dataclasses

import pytest

from ctpipe.components.lib.config import load_config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.steps.prepare_run.prepare import resolve_config
from ctpipe.components.steps.prepare_run.run_form import RunForm, defaults_of, run_form_from_values


def _form(compiled_json: str, **changes) -> RunForm:
    from ctpipe.components.lib.config import Config

    return dataclasses.replace(defaults_of(Config.from_json(compiled_json)), **changes)


@pytest.fixture
def compiled() -> str:
    return load_config(None, ["train.backend=pytorchjob", "train.max_steps=500"]).to_json()


def test_changed_knobs_apply_over_config_json(compiled):
    form = _form(compiled, training_steps=40, workers=3, learning_rate=0.01, batch_size=16,
                 blessing_allowed_change=-0.02, training_window_days=7)
    config = resolve_config(compiled, "", default_json=compiled, run_form=form)
    assert (config.train.max_steps, config.train.workers, config.train.lr, config.train.batch_size) == (40, 3, 0.01, 16)
    assert config.data.window_days == 7
    assert {rule.change_abs for rule in config.evaluate.thresholds.values()} == {-0.02}


def test_a_knob_left_at_its_default_keeps_what_config_json_says(compiled):
    """A user who edits the JSON in the form, and not the knob, gets the JSON's value."""
    edited = load_config(None, ["train.backend=pytorchjob", "train.max_steps=90", "train.lr=0.5"]).to_json()
    config = resolve_config(edited, "", default_json=compiled, run_form=_form(compiled, learning_rate=0.02))
    assert config.train.max_steps == 90  # the knob stayed at the compiled 500
    assert config.train.lr == 0.02  # the knob changed: it wins


def test_overrides_apply_after_the_form(compiled):
    config = resolve_config(compiled, "train.max_steps=70", default_json=compiled,
                            run_form=_form(compiled, training_steps=40))
    assert config.train.max_steps == 70


def test_a_window_of_zero_days_trains_on_every_partition():
    compiled = load_config(None, ["data.window_days=30"]).to_json()
    assert resolve_config(compiled, "", default_json=compiled, run_form=_form(compiled, training_window_days=0)
                          ).data.window_days is None


def test_integers_arrive_as_floats_from_kfp_and_still_apply():
    values = {"training_steps": 40.0, "workers": 2.0, "learning_rate": 0.003, "batch_size": 64.0,
              "blessing_allowed_change": 0, "training_window_days": 0.0}
    form = run_form_from_values(values)
    assert form.training_steps == 40 and isinstance(form.training_steps, int)
    assert isinstance(form.blessing_allowed_change, float)


@pytest.mark.parametrize(("name", "value", "needle"), [
    ("training_steps", 40.5, "training_steps=40.5 .*train.max_steps.*whole number"),
    ("learning_rate", "fast", "learning_rate='fast'.*must be a number"),
])
def test_bad_knob_values_are_named(name, value, needle):
    values = {"training_steps": 40, "workers": 2, "learning_rate": 0.003, "batch_size": 64,
              "blessing_allowed_change": 0.0, "training_window_days": 0, name: value}
    with pytest.raises(ConfigError, match=needle):
        run_form_from_values(values)


def test_a_negative_window_is_refused_with_what_is_allowed(compiled):
    with pytest.raises(ConfigError, match="training_window_days=-1.*0 to train on every partition"):
        resolve_config(compiled, "", default_json=compiled, run_form=_form(compiled, training_window_days=-1))


def test_a_knob_the_config_refuses_names_the_setting(compiled):
    with pytest.raises(ConfigError, match="train.lr"):
        resolve_config(compiled, "", default_json=compiled, run_form=_form(compiled, learning_rate=50.0))
