"""The MLflow UI as a person opens it from `ctpipe run`'s summary: in headless Chromium, on the run list.

MLflow 3.17's UI opens an experiment in its GenAI view (an empty Traces page) unless the address asks for
the machine-learning view; the experiment-kind tag alone does not change that (checked in this browser).
Needs Debian's chromium: skipped without it, except where CTPIPE_REQUIRE_BROWSER=1 (.ci/run) makes it a
failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import mlflow
import pytest

from ctpipe.components.lib.tracking.store import (
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    create_run,
    ensure_experiment,
)
from ctpipe.pipelines.local.run_summary import mlflow_ui_url
from ctpipe.testing.mlflow_server import free_port
from tests.fixtures.paths import REPO_ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

if shutil.which("chromium") is None and os.environ.get("CTPIPE_REQUIRE_BROWSER") != "1":
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)


def test_the_printed_mlflow_link_opens_on_the_run_list_without_a_click(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    uri = f"sqlite:///{home / 'mlflow.db'}"
    experiment = ensure_experiment(uri, "ctpipe")
    run_id = create_run(uri, experiment, run_name="ctpipe-ui-check", tags={"ctpipe.trigger": "manual"})
    mlflow.MlflowClient(uri).set_terminated(run_id)
    assert mlflow.MlflowClient(uri).get_experiment(experiment).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    summary = {"mlflow_experiment_id": experiment, "mlflow_run_id": run_id, "model_name": "m", "model_version": "1"}
    (home / "runs" / "r1").mkdir(parents=True)
    (home / "runs" / "r1" / "summary.json").write_text(json.dumps(summary))
    assert "workflowType=machine_learning" in mlflow_ui_url(summary)

    out = tmp_path / "shots"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "docs" / "screenshots.py"), "--home", str(home),
                           "--out", str(out), "--only", "runs", "--dom", "--port", str(free_port())],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    dom = (out / "runs.html").read_text()
    assert "ctpipe-ui-check" in dom, "the run list did not show the run"
    assert "matching run" in dom
    assert (out / "runs.png").stat().st_size > 10_000
