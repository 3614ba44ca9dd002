"""A full disk in a step: the step, its record, the run's summary and its MLflow run end as failed, naming the
step, the path and "no space left on device"; retryable (infrastructure), and no file is left half-written.

The full disk is the test-only step fault (ctpipe/testing/faults.py): every write through ``open`` fails with
ENOSPC after its file is created, as the kernel answers on a full disk.
"""

from __future__ import annotations

import errno
import json

import mlflow
import pytest

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.components.lib.tracking import ensure_experiment, log_step
from ctpipe.pipelines.local.run_summary import write_summary
from ctpipe.pipelines.triggers.retry import failure_kind
from ctpipe.testing.faults import STEP_FAULT_ENV, injected_step_fault
from tests.fixtures.step_records import summary_of


@pytest.fixture()
def mlflow_run(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    experiment = ensure_experiment(uri, "ctpipe-test")
    return uri, mlflow.MlflowClient(uri).create_run(experiment).info.run_id


def test_a_full_disk_fails_the_register_step_naming_the_step_the_path_and_the_cause(tmp_path, monkeypatch, mlflow_run,
                                                                                    capfd):
    """Before: a raw `OSError: [Errno 28]` traceback naming no step or file; on a disk full for the record too,
    the step's record stayed "running" and the MLflow run RUNNING."""
    status = tmp_path / "steps"
    status.mkdir()
    monkeypatch.setenv(STATUS_DIR_ENV, str(status))
    monkeypatch.setenv(STEP_FAULT_ENV, "disk_full@register")
    uri, run_id = mlflow_run
    with pytest.raises(OSError) as raised:
        with step_status("register", mlflow_run=mlflow_run):
            log_step(uri, run_id, "register", documents={"registration/registration.json": {"version": "1"}})
    assert raised.value.errno == errno.ENOSPC

    record = json.loads((status / "register.json").read_text())
    assert record["status"] == "failed" and record["user_error"] is False
    for needed in ("step 'register'", "registration.json", "no space left on device"):
        assert needed in record["error"], record["error"]
    assert "no space left on device" in capfd.readouterr().err  # said once, in the step's log
    assert mlflow.MlflowClient(uri).get_run(run_id).info.status == "FAILED"

    summary = summary_of(status)
    assert summary["status"] == "failed" and summary["steps"]["register"] == "failed"
    assert summary["error"]["step"] == "register" and "no space left on device" in summary["error"]["message"]
    # The watcher's ledger records the run's user_error flag: a full disk is retried, not given up on.
    assert failure_kind({"status": "failed", "user_error": summary["error"]["user_error"]}) == "infrastructure"


def test_the_run_summary_is_written_whole_or_not_at_all(tmp_path, monkeypatch):
    """Before: summary.json was written in place, and a full disk left it at 0 bytes."""
    monkeypatch.setenv(STEP_FAULT_ENV, "disk_full@summary")
    with injected_step_fault("summary"), pytest.raises(OSError) as raised:
        write_summary(tmp_path, {"status": "failed"})
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(tmp_path / "summary.json")
    assert list(tmp_path.iterdir()) == []  # no empty summary.json, no temporary file left behind

    path = write_summary(tmp_path, {"status": "failed"})
    assert json.loads(path.read_text())["summary_path"] == str(path.resolve())
