"""The run form, declared once (``run_form.KNOBS``): its knobs over config_json (a knob changed in the form wins,
one left at its default keeps the JSON), and everything derived from the table agrees with it."""

from __future__ import annotations

import inspect
import re

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config, resolve_config
from ctpipe.components.run_config.run_form import (
    KNOB_NAMES,
    KNOBS,
    form_defaults,
    form_text,
    markdown_table,
    parse_form_text,
)
from tests.fixtures.paths import REPO_ROOT


def _form(compiled_json: str, **changes) -> dict:
    return {**form_defaults(Config.from_json(compiled_json)), **changes}


@pytest.fixture
def compiled() -> str:
    return load_config(None, ["train.backend=pytorchjob", "train.max_steps=500"]).to_json()


def test_changed_knobs_apply_over_config_json(compiled):
    form = _form(compiled, training_steps=40, workers=3, learning_rate=0.01, batch_size=16,
                 blessing_allowed_change=-0.02, training_window_days=7)
    config = resolve_config(compiled=compiled, config_json=compiled, run_form=form)
    assert (config.train.max_steps, config.train.workers, config.train.lr, config.train.batch_size) == (40, 3, 0.01, 16)
    assert config.data.window_days == 7
    assert {rule.change_abs for rule in config.evaluate.thresholds.values()} == {-0.02}


def test_a_knob_left_at_its_default_keeps_what_config_json_says(compiled):
    """A user who edits the JSON in the form, and not the knob, gets the JSON's value."""
    edited = load_config(None, ["train.backend=pytorchjob", "train.max_steps=90", "train.lr=0.5"]).to_json()
    config = resolve_config(compiled=compiled, config_json=edited, run_form=_form(compiled, learning_rate=0.02))
    assert config.train.max_steps == 90  # the knob stayed at the compiled 500
    assert config.train.lr == 0.02  # the knob changed: it wins


def test_overrides_apply_after_the_form(compiled):
    config = resolve_config(compiled=compiled, run_form=_form(compiled, training_steps=40), overrides="train.max_steps=70")
    assert config.train.max_steps == 70


def test_a_window_of_zero_days_trains_on_every_partition():
    compiled = load_config(None, ["data.window_days=30"]).to_json()
    assert resolve_config(compiled=compiled, run_form=_form(compiled, training_window_days=0)).data.window_days is None


def test_integers_arrive_as_floats_from_kfp_and_still_apply(compiled):
    text = "training_steps=40.0\nworkers=2.0\nlearning_rate=0.003\nbatch_size=64.0\nblessing_allowed_change=0\n" \
           "training_window_days=0.0"
    form = parse_form_text(text)
    assert form["training_steps"] == 40 and isinstance(form["training_steps"], int)
    assert isinstance(form["blessing_allowed_change"], float)
    assert resolve_config(compiled=compiled, run_form=form).train.max_steps == 40


@pytest.mark.parametrize(("line", "needle"), [
    ("training_steps=40.5", "training_steps=40.5 .*train.max_steps.*whole number"),
    ("learning_rate=fast", "learning_rate='fast'.*must be a number"),
    ("learning_rate=nan", "learning_rate=nan.*must be a number"),
    ("epochs=3", "unknown knob.*epochs.*training_steps"),
])
def test_bad_knob_values_are_named(line, needle):
    with pytest.raises(ConfigError, match=needle):
        parse_form_text(line)


def test_a_negative_window_is_refused_with_what_is_allowed(compiled):
    with pytest.raises(ConfigError, match=r"training_window_days=-1 .*data.window_days.*\[1, 36,500\], or 0 for every"):
        resolve_config(compiled=compiled, run_form=_form(compiled, training_window_days=-1))


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.name)
def test_each_knobs_bounds_are_the_configs(knob, compiled):
    """The table's bounds agree with the config's own checks: a value inside applies, one outside is refused,
    by the form (naming the knob) and by the config (naming the setting)."""
    if knob.low == -float("inf"):
        config = resolve_config(compiled=compiled, run_form=_form(compiled, **{knob.name: knob.type(-5)}))
        assert {rule.change_abs for rule in config.evaluate.thresholds.values()} == {-5.0}
        return
    inside = knob.type(knob.high * 0.9 if knob.high_open else knob.high) if knob.name != "training_steps" else 1000
    config = resolve_config(compiled=compiled, run_form=_form(compiled, **{knob.name: inside}))
    assert resolve_config(compiled=compiled).to_json() != config.to_json()
    outside = knob.type(knob.high + 1) if knob.type is int else knob.high * 2
    with pytest.raises(ConfigError, match=rf"{knob.name}=.*{re.escape(knob.setting)}"):
        resolve_config(compiled=compiled, run_form=_form(compiled, **{knob.name: outside}))
    setting = knob.setting.replace("<metric>", "accuracy")
    with pytest.raises(ConfigError, match=re.escape(setting)):
        load_config(None, [f"{setting}={outside}"])


def test_the_pipeline_signature_is_the_table():
    from ctpipe.pipelines.continuous_training import build_pipeline

    compiled = load_config(None, ["train.max_steps=321", "train.lr=0.002"])
    pipeline = build_pipeline(None, default_config_json=compiled.to_json())
    parameters = inspect.signature(pipeline.pipeline_func).parameters
    knobs = [name for name in parameters if name in KNOB_NAMES]
    assert tuple(knobs) == KNOB_NAMES
    assert parameters["training_steps"].default == 321 and parameters["learning_rate"].default == 0.002
    assert all(parameters[knob.name].annotation is knob.type for knob in KNOBS)
    described = pipeline.component_spec.inputs
    for knob in KNOBS:
        assert knob.setting in described[knob.name].description, knob.name


def test_prepare_run_takes_every_knob_through_one_text():
    """The pipeline hands prepare_run the knobs as name=value lines that KFP fills in; prepare_run has no
    parameter of its own per knob, so adding a knob does not touch it."""
    from ctpipe.components.steps.prepare_run.component import prepare_run

    assert not set(KNOB_NAMES) & set(inspect.signature(prepare_run.python_func).parameters)
    values = {knob.name: 7 for knob in KNOBS}
    assert parse_form_text(form_text(values)) == {name: 7 for name in KNOB_NAMES}


def test_the_docs_table_is_the_table():
    docs = (REPO_ROOT / "docs" / "run-form.md").read_text()
    assert markdown_table() in docs, "docs/run-form.md's run form table differs from run_form.KNOBS; expected:\n" \
        + markdown_table()
