"""Rank 0's MLflow tracker goes through ctpipe.components.lib.tracking's retrying call, like every step."""

from __future__ import annotations

import mlflow
import pytest

from ctpipe.components.engine.tracker import make_tracker
from ctpipe.components.lib.tracking import (
    RegistryUnavailableError,
    RetryPolicy,
    ensure_experiment,
    local_tracking_uri,
)

ONE_RETRY = RetryPolicy(retries=1, backoff_seconds=0.0, max_backoff_seconds=0.0)
DOWN = "http://127.0.0.1:9"  # nothing listens there: every request is refused


@pytest.mark.parametrize("call,what", [
    (lambda t: t.set_tags({"ctpipe.train.status": "finished"}), "set the training tags"),
    (lambda t: t.log_params({"train.lr": 0.1}), "read the params of"),
    (lambda t: t.log_artifact(__file__, "training"), "log training/test_tracker.py"),
])
def test_a_server_that_stays_down_is_retried_then_reported(call, what):
    tracker = make_tracker(0, DOWN, "r1", retry=ONE_RETRY)
    try:
        with pytest.raises(RegistryUnavailableError, match=rf"{what}.* MLflow run r1: 2 attempts"):
            call(tracker)
    finally:
        tracker.close()


def test_the_tracker_logs_params_metrics_tags_and_artifacts_into_the_run(tmp_path):
    uri = local_tracking_uri(tmp_path)
    client = mlflow.MlflowClient(tracking_uri=uri)
    run_id = client.create_run(ensure_experiment(uri, "ctpipe")).info.run_id
    tracker = make_tracker(0, uri, run_id, retry=ONE_RETRY)
    tracker.log_params({"train.lr": 0.1})
    tracker.log_params({"train.lr": 0.1, "train.steps": 3})  # a resume: only what is new is sent
    # Prepare logged the config before tuning: the value trained with goes beside it (MLflow params are immutable).
    tracker.log_params({"train.lr": 0.2})
    tracker.log_metrics({"loss": 1.5}, step=1)
    tracker.set_tags({"ctpipe.train.status": "finished"})
    tracker.log_artifact(__file__, "training")
    tracker.close()
    data = client.get_run(run_id).data
    assert data.params == {"train.lr": "0.1", "train.steps": "3", "trained.train.lr": "0.2"}
    assert data.metrics == {"loss": 1.5} and data.tags["ctpipe.train.status"] == "finished"
    assert [a.path for a in client.list_artifacts(run_id, "training")] == ["training/test_tracker.py"]


def test_other_ranks_get_a_tracker_that_does_nothing():
    assert type(make_tracker(1, DOWN, "r1", retry=ONE_RETRY)).__name__ == "NullTracker"
