"""What fired a trigger (the watcher's drift or decay finding) reaches the run it starts, locally and on KFP, and
its first step records it on the run's MLflow run (the register step copies it into the version's lineage:
tests/components/steps/register/test_register.py)."""

from __future__ import annotations

import pytest

from ctpipe.pipelines.triggers.ledger import Ledger

# A decay finding as watch_decay words it; a reason may start with anything, a dash included.
REASON = ("accuracy of version 1 on the cohort of 2026-03-15 (300 rows joined): 0.510, interval [0.453, 0.567] "
          "wholly below its test accuracy 0.800 minus watch.decay.max_drop=0.05")


def claimed(home, reason: str = REASON):
    ledger = Ledger(home)
    assert ledger.claim("f" * 64, {"trigger": "decay", "reason": reason, "data_uri": "/data"})
    return ledger.path("f" * 64)


@pytest.mark.parametrize("reason", [REASON, "-5% accuracy --set x=1"])
def test_a_local_run_gets_the_watchers_reason_as_one_argument(tmp_path, reason):
    from ctpipe.pipelines.cli.main import build_parser
    from ctpipe.pipelines.triggers.start import LocalStarter

    record = claimed(tmp_path, reason)
    cmd = LocalStarter(tmp_path).command(trigger="decay", data_uri="/data", record_path=record)
    args = build_parser().parse_args(cmd[cmd.index("submit"):])
    assert (args.trigger, args.trigger_reason) == ("decay", reason)


def test_a_kfp_run_gets_the_watchers_reason_as_its_parameter(tmp_path, monkeypatch):
    from ctpipe.pipelines.compile import compile_pipeline
    from ctpipe.pipelines.deploy import upload as deploy
    from ctpipe.pipelines.triggers.start import KfpStarter
    from tests.fakes.kfp_api import FakeKfpServer

    package = str(compile_pipeline(tmp_path / "pipeline.yaml", None, [], None))
    monkeypatch.setenv("KFP_TOKEN", "t")
    with FakeKfpServer(token="t") as server:  # it refuses a parameter the compiled pipeline does not declare
        client = deploy.connect(server.url)
        deploy.deploy(client, package, version_name="v1")
        info = KfpStarter(client, experiment="ctpipe").start(trigger="decay", data_uri="/data", fingerprint="f" * 64,
                                                             record_path=claimed(tmp_path / "home"))
        parameters = server.state.runs[info["run_id"]]["runtime_config"]["parameters"]
    assert parameters["trigger"] == "decay" and parameters["trigger_reason"] == REASON


def test_the_first_step_records_the_reason_on_the_runs_mlflow_run(tmp_path):
    import mlflow

    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.lib.tracking.lineage import TRIGGER_REASON_TAG
    from ctpipe.components.run_config import load_config
    from ctpipe.components.steps.prepare_run.prepare import prepare_run

    write_demo_data(tmp_path / "data", days=1, rows_per_day=20)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    config = load_config(None, []).to_json()
    started = prepare_run(config, "", tracking_uri=uri, pipeline_run_id="p1", trigger="decay",
                          data_uri=str(tmp_path / "data"), trigger_reason=REASON)
    by_hand = prepare_run(config, "", tracking_uri=uri, pipeline_run_id="p2", trigger="manual",
                          data_uri=str(tmp_path / "data"))
    client = mlflow.MlflowClient(tracking_uri=uri)
    assert client.get_run(started.mlflow_run_id).data.tags[TRIGGER_REASON_TAG] == REASON
    assert client.get_run(by_hand.mlflow_run_id).data.tags[TRIGGER_REASON_TAG] == "trigger manual: no reason given"
