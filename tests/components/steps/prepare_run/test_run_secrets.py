"""The first step refuses a URI with credentials before it records anything (MLflow tags, the step record)."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.errors import UserError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.prepare_run.prepare import prepare_run


@pytest.mark.parametrize("where", ["data_uri", "tracking_uri"])
def test_a_run_parameter_with_credentials_stops_the_first_step_before_mlflow_is_opened(tmp_path, where):
    uris = {"data_uri": str(tmp_path / "data"), "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db"}
    uris[where] = "http://etl:hunter2@files.example.com/data"
    with pytest.raises(UserError, match=f"{where}.*holds credentials") as info:
        prepare_run(load_config(None, []).to_json(), "", pipeline_run_id="p1", trigger="manual", **uris)
    assert "hunter2" not in str(info.value)
    assert not (tmp_path / "mlflow.db").exists()


def test_ctpipe_run_refuses_data_with_credentials_before_it_makes_a_run_folder(tmp_path, capsys):
    from ctpipe.pipelines.cli.main import main

    assert main(["run", "--home", str(tmp_path / "home"), "--data", "sftp://etl:hunter2@files/data"]) == 2
    err = capsys.readouterr().err
    assert "--data holds credentials" in err and "hunter2" not in err
    assert not (tmp_path / "home" / "runs").exists()
