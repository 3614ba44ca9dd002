"""The local run's summary is derived from the steps' own status records."""

import re

import pytest

from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.pipelines.local.run_summary import format_summary
from tests.fixtures.step_records import failed_step_record, summary_of


def test_failed_step_is_reported_and_later_steps_are_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    with step_status("prepare_run") as record:
        record.result = {"pipeline_run_id": "42", "mlflow_run_id": "abc"}
    record = failed_step_record(tmp_path, "validate_data",
                                DataValidationError("column 'x' has text where numbers are expected"))
    summary = summary_of(tmp_path)
    assert summary["status"] == "failed"
    assert summary["run_id"] == "42"
    assert summary["steps"]["prepare_run"] == "passed"
    assert summary["steps"]["validate_data"] == "failed"
    assert summary["steps"]["train"] == "skipped"
    assert summary["error"] == {
        "step": "validate_data",
        "message": "column 'x' has text where numbers are expected",
        "user_error": True,
        "type": "DataValidationError",  # the watcher tells the data's errors from others by it
    }
    assert record["traceback"] is None  # user errors carry no traceback
    assert "champion is unchanged" in format_summary(summary)


def test_internal_errors_keep_their_traceback(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    record = failed_step_record(tmp_path, "train", RuntimeError("rank 1 died"))
    assert record["user_error"] is False and "RuntimeError: rank 1 died" in record["traceback"]


def test_runner_error_without_step_records_fails_the_run(tmp_path):
    summary = summary_of(tmp_path, runner_error="RuntimeError: boom")
    assert summary["status"] == "failed"
    assert set(summary["steps"].values()) == {"skipped"}
    assert summary["error"]["message"] == "RuntimeError: boom"


def test_no_status_dir_means_no_records(tmp_path, monkeypatch):
    monkeypatch.delenv(STATUS_DIR_ENV, raising=False)
    with step_status("train"):
        pass
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("entrypoint", "named"),
    [("no_such_user_module:make_task", "no_such_user_module"), ("json:no_such_factory", "no_such_factory")],
)
def test_a_task_entrypoint_that_does_not_resolve_stops_the_run_before_any_step(tmp_path, monkeypatch, entrypoint, named):
    # The user's task is resolved before the demo data, the run folder or any step process exists.
    from ctpipe.components.lib.errors import UserError
    from ctpipe.pipelines.local.local_run import run_local

    monkeypatch.setenv("CTPIPE_WARM_START", "0")
    home = tmp_path / "home"
    with pytest.raises(UserError, match=named):
        run_local(home=home, overrides=[f"task.entrypoint={entrypoint}"], verbosity=-1)
    assert not (home / "runs").exists() and not (home / "data").exists() and not (home / "mlflow.db").exists()


def test_the_summary_says_when_the_candidate_is_not_servable(tmp_path, monkeypatch):
    # Before: a candidate that failed the serving check read "registered ... (aliases: challenger)" with no why.
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    why = "served predictions differ from the evaluated ones: column 'stay' differs on 16 of 16 rows"
    with step_status("register") as record:
        record.result = {"version": "2", "aliases": ["challenger"], "promoted": False, "servable": False,
                         "serving_check": why, "promotion_reason": f"not promoted: blessed, but not servable ({why})"}
    summary = summary_of(tmp_path)
    assert summary["servable"] is False and summary["serving_check"] == why
    assert f"servable           NO: the champion was not moved to it ({why})" in format_summary(summary)


@pytest.mark.parametrize(("setting", "said"), [
    ("data.label=churn", "label column 'churn' is not in the data"),
    ("data.key=client_id", "key column 'client_id' is not in the data"),
    ("data.features=[tenure_months,spend]", "feature column(s) spend are not in the data"),
])
def test_a_setting_the_data_s_columns_refute_stops_the_run_before_any_step(tmp_path, monkeypatch, setting, said):
    """Issue 47: a bad label took 78 s to be reported under load (start-up and prepare_run first); the first
    file's header alone shows it, so ``ctpipe run`` says so before a run folder or a step process exists."""
    from ctpipe.components.lib.errors import UserError
    from ctpipe.pipelines.local.local_run import run_local
    from tests.fixtures.corpus import write_clean

    monkeypatch.setenv("CTPIPE_WARM_START", "0")
    data, home = write_clean(tmp_path / "data", days=2), tmp_path / "home"
    with pytest.raises(UserError, match=re.escape(said)):
        run_local(home=home, data_uri=str(data), overrides=[setting], verbosity=-1)
    assert not (home / "runs").exists() and not (home / "mlflow.db").exists()


def test_the_preflight_passes_data_whose_columns_fit_the_config(tmp_path):
    from ctpipe.components.run_config import load_config
    from ctpipe.pipelines.local.local_run import _preflight
    from tests.fixtures.corpus import KEY, write_clean

    data = write_clean(tmp_path / "data", days=2)
    _preflight(load_config(None, [f"data.key={KEY}", "data.label=label"]), str(data))
    # A task that needs no label is not held to data.label (causal_lm reads its text column).
    _preflight(load_config(None, ["task.name=causal_lm", "data.label=absent", "data.key=null"]), str(data))
