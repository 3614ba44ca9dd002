"""Names that become MLflow names and folder names are refused at config time, listing what is allowed."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config


@pytest.mark.parametrize("setting", [
    "registry.model_name=team/model",
    "registry.model_name=..",
    "registry.model_name=a:b",
    "registry.model_name=.hidden",
    "registry.experiment=../../../x",
    "registry.experiment=team/exp",
    "registry.experiment=a..b",
    "registry.experiment=" + "x" * 200,
])
def test_a_registry_name_that_would_escape_a_folder_or_break_mlflow_is_refused(setting):
    field = setting.split("=", 1)[0]
    with pytest.raises(ConfigError, match=rf"'{field}'.*no '/', no '\.\.'") as info:
        load_config(None, [setting])
    assert "letters, digits" in str(info.value)  # the allowed characters are listed


@pytest.mark.parametrize("setting", ["registry.champion_alias=latest", "registry.challenger_alias=v3",
                                     "registry.champion_alias=prod/eu"])
def test_an_alias_mlflow_would_refuse_is_refused_at_config_time(setting):
    with pytest.raises(ConfigError, match=setting.split("=")[0].replace(".", r"\.")):
        load_config(None, [setting])


@pytest.mark.parametrize("setting", ["registry.model_name=team-a.churn_v2", "registry.experiment=Retraining-2025",
                                     "registry.champion_alias=production"])
def test_ordinary_names_pass(setting):
    field, value = setting.split("=")
    assert getattr(load_config(None, [setting]).registry, field.split(".")[1]) == value


def test_ctpipe_compile_refuses_a_model_name_with_a_slash_with_exit_2(tmp_path, capsys):
    from ctpipe.pipelines.cli.main import main

    out = tmp_path / "pipeline.yaml"
    assert main(["compile", "--out", str(out), "--set", "registry.model_name=team/model"]) == 2
    assert "registry.model_name" in capsys.readouterr().err and not out.exists()
