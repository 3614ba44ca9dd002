"""The run form locally: the pipeline function run by KFP's local runner with typed values set."""

import json

import mlflow
import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.lineage import TRIGGER_REASON_TAG, version_lineage
from ctpipe.pipelines.local.local_run import run_local
from ctpipe.pipelines.triggers.report import page_parameters

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
# What the watcher's ledger record says fired the run (tests/pipelines/triggers/test_trigger_reason.py).
REASON = "accuracy of version 1 on the cohort of 2026-03-15 (300 rows joined): 0.510, interval [0.453, 0.567]"


def test_typed_values_reach_the_resolved_config_and_the_mlflow_params(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    data = tmp_path / "data"
    write_demo_data(data, days=3, rows_per_day=300, seed=3)
    home = tmp_path / "home"
    # The watcher's decay page that started the run, with its digest (ctpipe submit --drift-report passes them).
    report = tmp_path / "reports" / "decay-1-2026-03-15.json"
    report.parent.mkdir()
    report.with_suffix(".html").write_text("<!doctype html><html><body><h1>decay of version 1</h1></body></html>")
    summary = run_local(
        home=home,
        data_uri=str(data),
        overrides=["train.max_steps=60", "train.warmup_steps=5", "train.eval_every=10", "train.checkpoint_every=10",
                   "evaluate.thresholds.accuracy.value=0.3", "data.key=customer_id"],
        verbosity=-1,
        parameters={"training_steps": 30, "learning_rate": 0.004, "batch_size": 32, "training_window_days": 2,
                    **page_parameters(report)},
        trigger="decay", trigger_reason=REASON,
    )
    assert summary["status"] == "succeeded", summary["error"]
    # The registry named too: left to MLflow, it is the process's global one, which an earlier test may have set.
    client = mlflow.MlflowClient(local_tracking_uri(home), registry_uri=local_tracking_uri(home))
    local = client.download_artifacts(summary["mlflow_run_id"], "config/config.json", str(tmp_path))
    resolved = json.loads(open(local).read())
    # The knobs won over --set's train.max_steps=60; the rest of config_json stayed.
    assert resolved["train"]["max_steps"] == 30 and resolved["train"]["lr"] == 0.004
    assert resolved["train"]["batch_size"] == 32 and resolved["data"]["window_days"] == 2
    assert resolved["train"]["eval_every"] == 10
    params = client.get_run(summary["training_mlflow_run_id"]).data.params
    assert (params["train.max_steps"], params["train.lr"], params["train.batch_size"]) == ("30", "0.004", "32")
    assert params["data.window_days"] == "2"
    # The reason reaches the run and the version it registered, beside the trigger.
    tags = client.get_run(summary["mlflow_run_id"]).data.tags
    assert (tags["ctpipe.trigger"], tags[TRIGGER_REASON_TAG]) == ("decay", REASON)
    version = client.get_model_version(resolved["registry"]["model_name"], summary["model_version"])
    assert version.tags["ctpipe.trigger"] == "decay" and version_lineage(client, version)["trigger_reason"] == REASON
    # The page is the first step's HTML output (what the KFP UI renders), byte for byte.
    (published,) = [p for p in home.rglob("trigger_report") if p.is_file()]
    assert published.read_bytes() == report.with_suffix(".html").read_bytes()
