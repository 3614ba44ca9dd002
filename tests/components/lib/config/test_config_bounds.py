"""Every numeric setting has an upper bound the code can use: a huge finite value fails at config time.

``train.timeout_minutes=1e308`` was accepted and overflowed inside every rank (timedelta); a row count,
a step count or a wait of 1e30 is no more usable. The test walks every section's int and float fields,
so a new numeric setting without a bound fails here.
"""

from __future__ import annotations

import dataclasses
import typing

import pytest

from ctpipe.components.lib.config import Config, ConfigError
from ctpipe.components.run_config import load_config


def numeric_settings() -> list[tuple[str, type]]:
    """(``section.field``, int or float) for every numeric field of every config section."""
    found = []
    sections = typing.get_type_hints(Config)
    for section in dataclasses.fields(Config):
        hints = typing.get_type_hints(sections[section.name])
        for field in dataclasses.fields(sections[section.name]):
            if typing.get_origin(hints[field.name]) is dict:  # a mapping (evaluate.floors): its values are checked
                continue
            kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
            if float in kinds:
                found.append((f"{section.name}.{field.name}", float))
            elif int in kinds and bool not in kinds:
                found.append((f"{section.name}.{field.name}", int))
    return found


def test_the_walk_finds_the_numeric_settings():
    names = {name for name, _ in numeric_settings()}
    assert {"train.timeout_minutes", "train.batch_size", "watch.cool_down_seconds", "kubernetes.backoff_limit"} <= names
    assert len(names) > 50


@pytest.mark.parametrize(("setting", "kind"), numeric_settings(), ids=[name for name, _ in numeric_settings()])
def test_a_huge_finite_value_is_refused_naming_the_setting_and_its_bound(setting, kind):
    section, field = setting.split(".")
    huge = 1e308 if kind is float else 10**30
    with pytest.raises(ConfigError, match=rf"'{section}\.{field}': .*must be .*(in [[(]|fraction in )") as info:
        Config.from_dict({section: {field: huge}})
    assert "e+308" in str(info.value) or "1000000000000000000000000000000" in str(info.value)  # the value named


def test_the_defaults_are_within_every_bound():
    resolved = load_config(None, [])
    # Only the default task's own defaults (selection and blessing rules: components/tasks/tabular.py) differ.
    assert dataclasses.replace(Config.from_dict({}), select=resolved.select, evaluate=resolved.evaluate) == resolved


def test_train_timeout_minutes_1e308_is_a_user_error_of_ctpipe_train(tmp_path, capsys):
    from ctpipe.pipelines.cli.main import main

    code = main(["train", "--data", str(tmp_path), "--out", str(tmp_path / "out"), "--set", "train.timeout_minutes=1e308"])
    assert code == 2
    assert "train.timeout_minutes" in capsys.readouterr().err


@pytest.mark.parametrize(("test", "high"), [("psi", 100.0), ("ks", 1.0), ("cramers_v", 1.0)])
def test_per_column_drift_thresholds_are_bounded_like_the_global_ones(test, high):
    with pytest.raises(ConfigError, match=rf"'watch\.column_thresholds\.age\.{test}': .*must be in \[0, {high}\]"):
        Config.from_dict({"watch": {"column_thresholds": {"age": {test: 1e308}}}})
    assert Config.from_dict({"watch": {"column_thresholds": {"age": {test: high}}}}).watch.column_thresholds["age"][test] == high
