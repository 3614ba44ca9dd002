"""Config values that were accepted but silently changed or dropped (a skeptical review's cases)."""

import pytest

from components.config import load_config
from components.errors import ConfigError
from components.run_setup.prepare import resolve_config


def test_duplicate_key_in_a_config_file_is_refused_naming_it(tmp_path):
    # PyYAML keeps the last of two equal keys: a second `train:` section silently dropped the first's settings.
    path = tmp_path / "run.yaml"
    path.write_text("train:\n  max_steps: 200\ntrain:\n  lr: 0.01\n")
    with pytest.raises(ConfigError, match=r"run\.yaml.*'train'.*line 3"):
        load_config(path)
    path.write_text("train:\n  max_steps: 200\n  max_steps: 300\n")
    with pytest.raises(ConfigError, match=r"'max_steps'.*more than once"):
        load_config(path)


def test_a_whole_mapping_then_one_of_its_keys_keeps_both_in_order():
    # `thresholds={}` then a rule: the rule was silently dropped (the whole mapping was applied last).
    settings = ["evaluate.thresholds={}", "evaluate.thresholds.auc.value=0.7"]
    config = load_config(None, settings)
    assert list(config.evaluate.thresholds) == ["auc"] and config.evaluate.thresholds["auc"].value == 0.7
    assert list(resolve_config("", "\n".join(settings)).evaluate.thresholds) == ["auc"]
    # The other order still means "no rules": the later whole mapping replaces the earlier rule.
    assert load_config(None, settings[::-1]).evaluate.thresholds == {}


@pytest.mark.parametrize("setting", ["evaluate.thresholds.accuracy.change_abs=.nan",
                                     "evaluate.thresholds.accuracy.change_rel=nan",
                                     "evaluate.thresholds.accuracy.value=nan",
                                     "evaluate.slice_thresholds.accuracy.change_abs=NaN"])
def test_nan_in_a_blessing_rule_is_refused(setting):
    # A NaN bound was accepted and then failed every candidate with "allowed change +nan": refuse it up front.
    with pytest.raises(ConfigError, match=r"(?i)evaluate\.(slice_)?thresholds\..*nan"):
        load_config(None, [setting])
