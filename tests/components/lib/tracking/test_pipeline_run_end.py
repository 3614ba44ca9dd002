"""The pipeline run's MLflow run ends with the run: FINISHED by the last step, FAILED or KILLED by a failing one."""

from __future__ import annotations

import mlflow
import pytest

from ctpipe.components.lib.kfp_support import step_status
from ctpipe.components.lib.tracking import ensure_experiment, find_or_create_run, local_tracking_uri


@pytest.fixture
def run(tmp_path):
    uri = local_tracking_uri(tmp_path)
    experiment = ensure_experiment(uri, "ctpipe")
    run_id, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p1", run_name="p1", tags={})
    return uri, run_id


def _status(uri: str, run_id: str) -> str:
    return mlflow.MlflowClient(uri).get_run(run_id).info.status


def test_a_step_that_passes_leaves_the_run_open_and_the_last_step_finishes_it(run):
    with step_status("evaluate", mlflow_run=run):
        pass
    assert _status(*run) == "RUNNING"  # later steps still log to it
    with step_status("register", mlflow_run=run, ends_run=True):
        pass
    assert _status(*run) == "FINISHED"


@pytest.mark.parametrize(("error", "status"), [(ValueError("bad data"), "FAILED"), (KeyboardInterrupt(), "KILLED")])
def test_a_failing_step_ends_the_run_failed_or_killed_and_keeps_its_own_error(run, error, status):
    with pytest.raises(type(error)), step_status("validate_data", mlflow_run=run):
        raise error
    assert _status(*run) == status


def test_an_unreachable_mlflow_does_not_replace_the_steps_error(tmp_path):
    with pytest.raises(ValueError, match="the step's own error"), step_status(
        "train", mlflow_run=("http://127.0.0.1:9", "0123456789abcdef")
    ):
        raise ValueError("the step's own error")


def test_a_failing_cached_step_ends_the_pipeline_runs_that_wait_on_its_training_run(tmp_path):
    """With caching, validate..select log to the run of their content; the pipeline run that names it (and
    only a RUNNING one) ends FAILED with them, as it did when the steps logged to it directly."""
    from ctpipe.components.lib.tracking import TRAINING_RUN_TAG, set_run_tag

    uri = local_tracking_uri(tmp_path)
    experiment = ensure_experiment(uri, "ctpipe")
    training, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.content_key", key="k1", run_name="t", tags={})
    waiting, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p2", run_name="p2", tags={})
    done, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p1", run_name="p1", tags={})
    other, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p3", run_name="p3", tags={})
    for run_id in (waiting, done):
        set_run_tag(uri, run_id, TRAINING_RUN_TAG, training)
    mlflow.MlflowClient(uri).set_terminated(done, "FINISHED")
    with pytest.raises(ValueError), step_status("train", mlflow_run=(uri, training)):
        raise ValueError("the job failed")
    assert [_status(uri, r) for r in (training, waiting, done, other)] == ["FAILED", "FAILED", "FINISHED", "RUNNING"]


def test_a_failed_gate_of_a_cached_step_is_recorded_on_the_pipeline_runs_that_wait_on_it(tmp_path):
    """The watcher reads a KFP run's gate verdicts from the MLflow run tagged with its id (the pipeline run); with
    caching the gate's verdict was only on the content run, so a failed validation read as an infrastructure
    failure and was retried. The pipeline runs ended with it now carry the verdict too."""
    from ctpipe.components.lib.tracking import TRAINING_RUN_TAG, set_run_tag, tags_of_runs_tagged

    uri = local_tracking_uri(tmp_path)
    experiment = ensure_experiment(uri, "ctpipe")
    training, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.content_key", key="k1", run_name="t", tags={})
    waiting, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p1", run_name="p1", tags={})
    set_run_tag(uri, waiting, TRAINING_RUN_TAG, training)
    with pytest.raises(ValueError), step_status("validate_data", mlflow_run=(uri, training)):
        set_run_tag(uri, training, "ctpipe.validation", "failed")  # what validation logs before it raises
        raise ValueError("2 rows have no label")
    assert [tags.get("ctpipe.validation") for tags in tags_of_runs_tagged(uri, "ctpipe", "ctpipe.pipeline_run_id", "p1")] \
        == ["failed"]
