"""The typed config: defaults, files, --set overrides and errors that name the field."""

import json

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config


def test_defaults_round_trip_through_json():
    config = Config()
    assert Config.from_json(config.to_json()) == config


def test_set_overrides_are_typed():
    config = load_config(None, ["train.max_steps=120", "train.lr=0.01", "sanity.enabled=false", "data.key=id"])
    assert config.train.max_steps == 120 and isinstance(config.train.max_steps, int)
    assert config.train.lr == pytest.approx(0.01)
    assert config.sanity.enabled is False
    assert config.data.key == "id"


def test_nested_threshold_override_keeps_other_fields():
    config = load_config(None, ["evaluate.thresholds.accuracy.value=0.8"])
    rule = config.evaluate.thresholds["accuracy"]
    assert rule.value == pytest.approx(0.8)
    assert rule.direction == "auto" and rule.change_abs == 0.0  # the default's other fields stay


def test_null_clears_an_optional_field():
    assert load_config(None, ["data.key=null"]).data.key is None


def test_kfp_float_integers_are_accepted():
    # KFP hands integer parameters over as floats.
    config = Config.from_dict({"train": {"max_steps": 200.0}})
    assert config.train.max_steps == 200


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.nope=1", "train.nope"),
        ("nosection.x=1", "nosection"),
        ("train.max_steps=abc", "train.max_steps"),
        ("train.max_steps=0", "train.max_steps"),
        ("train.strategy=zero3", "train.strategy"),
        ("train.workers=-1", "train.workers"),
        ("model.dropout=1.5", "model.dropout"),
        ("data.val_fraction=0.85", "data.val_fraction"),
        ("train.lr=fast", "train.lr"),
    ],
)
def test_bad_values_name_the_field(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(None, [override])


def test_set_without_equals_is_explained():
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, ["train.max_steps"])


def test_config_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  max_steps: 77\n  lr: 0.002\nmodel:\n  kind: transformer\n  hidden: 32\n")
    config = load_config(path, ["train.max_steps=88"])
    assert config.train.max_steps == 88
    assert config.train.lr == pytest.approx(0.002)
    assert config.model.kind == "transformer"


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"train": {"unknown_knob": 1}}))
    with pytest.raises(ConfigError, match="train.unknown_knob"):
        load_config(bad)


def test_a_mapping_given_in_full_replaces_the_default(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("evaluate:\n  thresholds: {}\n")
    assert load_config(path).evaluate.thresholds == {}
    assert load_config(None, ["evaluate.thresholds={}"]).evaluate.thresholds == {}
    only_f1 = load_config(None, ["evaluate.thresholds={macro_f1: {value: 0.5}}"]).evaluate.thresholds
    assert set(only_f1) == {"macro_f1"}
    # A path into the mapping still merges with the defaults.
    assert set(load_config(None, ["evaluate.thresholds.macro_f1.value=0.5"]).evaluate.thresholds) == {
        "accuracy",
        "log_loss",
        "macro_f1",
    }
