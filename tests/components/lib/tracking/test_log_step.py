"""log_step: one call records a step's metrics, tags, files and documents on MLflow/SQLite, with retries."""

from __future__ import annotations

import json
import subprocess
import sys

import mlflow
import pytest

from ctpipe.components.lib.tracking import RetryPolicy, ensure_experiment, local_tracking_uri, log_step
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError


def _run(tmp_path) -> tuple[str, str]:
    uri = local_tracking_uri(tmp_path)
    run_id = mlflow.MlflowClient(tracking_uri=uri).create_run(ensure_experiment(uri, "ctpipe")).info.run_id
    return uri, run_id


def test_a_step_logs_metrics_tags_files_folders_and_documents_in_one_call(tmp_path):
    uri, run_id = _run(tmp_path)
    report = tmp_path / "report"  # a KFP artifact path has no extension; the run names the file
    report.write_text("# Report\n")
    folder = tmp_path / "pyfunc"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "MLmodel").write_text("flavors: {}\n")
    logged = log_step(
        uri, run_id, "demo",
        metrics={"demo.rows": 3, "demo.nan": float("nan"), "demo.none": None},
        tags={"ctpipe.demo": "passed"},
        files={"demo/report.md": report, "model": folder, "demo/missing.md": tmp_path / "absent", "demo/empty": ""},
        documents={"demo/summary.json": {"passed": True, "path": tmp_path}},
    )  # fmt: skip
    assert logged is True
    client = mlflow.MlflowClient(tracking_uri=uri)
    data = client.get_run(run_id).data
    assert data.metrics == {"demo.rows": 3.0}  # NaN and None left out: MLflow's UI cannot show them
    assert data.tags["ctpipe.demo"] == "passed"
    assert {a.path for a in client.list_artifacts(run_id, "demo")} == {"demo/report.md", "demo/summary.json"}
    assert [a.path for a in client.list_artifacts(run_id, "model/sub")] == ["model/sub/MLmodel"]
    local = mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="demo", dst_path=str(tmp_path / "dl"),
                                                tracking_uri=uri)
    assert json.loads((tmp_path / "dl" / "demo" / "summary.json").read_text()) == {"passed": True, "path": str(tmp_path)}
    assert (tmp_path / "dl" / "demo" / "report.md").read_text() == "# Report\n" and local


def test_without_a_tracking_uri_or_run_nothing_is_logged_and_mlflow_is_not_imported():
    code = (
        "import sys; from ctpipe.components.lib.tracking import log_step\n"
        "assert log_step('', 'r', 'x', metrics={'a': 1}) is False and log_step('sqlite:///x.db', '', 'x') is False\n"
        "assert 'mlflow' not in sys.modules, 'importing ctpipe.components.lib.tracking must not import mlflow'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_a_server_that_stays_down_is_retried_then_reported_with_the_step_named():
    policy = RetryPolicy(retries=1, backoff_seconds=0.0, max_backoff_seconds=0.0)
    with pytest.raises(RegistryUnavailableError, match=r"log the sanity step's results to MLflow run r1: 2 attempts"):
        log_step("http://127.0.0.1:9", "r1", "sanity", metrics={"sanity.x": 1.0}, retry=policy)


def test_the_policy_comes_from_the_registry_section():
    from ctpipe.components.lib.config import RegistryConfig

    cfg = RegistryConfig(retries=2, retry_backoff_seconds=0.5, retry_max_backoff_seconds=4.0)
    assert RetryPolicy.of(cfg) == RetryPolicy(retries=2, backoff_seconds=0.5, max_backoff_seconds=4.0)


def test_params_beyond_one_request_are_all_logged_and_a_retry_may_resend_them(tmp_path):
    from ctpipe.components.lib.tracking import flatten_params

    uri, run_id = _run(tmp_path)
    params = flatten_params({"section": {f"field_{i}": i for i in range(250)}, "model": {"kind": "mlp"}, "empty": {}})
    assert params["section.field_7"] == "7" and params["empty"] == "{}"
    for _ in range(2):
        log_step(uri, run_id, "prepare_run", params=params)
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(run_id).data.params == params
