"""The pipeline run gets a copy of what the cached steps logged to the content run (issue 47): the version's
source run, the pipeline run, carries the params, the metrics and the reports a data scientist looks for."""

from __future__ import annotations

from pathlib import Path

import mlflow

from ctpipe.components.lib.tracking import (
    TRAINING_RUN_TAG,
    RetryPolicy,
    adopt_training_run,
    ensure_experiment,
    find_or_create_run,
    local_tracking_uri,
    set_run_tag,
)


def _runs(tmp_path):
    uri = local_tracking_uri(tmp_path)
    experiment = ensure_experiment(uri, "ctpipe")
    pipeline, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.pipeline_run_id", key="p1", run_name="p1", tags={})
    training, _ = find_or_create_run(uri, experiment, key_tag="ctpipe.content_key", key="k1", run_name="t",
                                     tags={"mlflow.parentRunId": pipeline})
    return uri, mlflow.MlflowClient(uri), pipeline, training


def test_params_latest_metrics_verdicts_and_reports_are_copied_onto_the_pipeline_run(tmp_path):
    uri, client, pipeline, training = _runs(tmp_path)
    client.log_param(pipeline, "train.lr", "0.01")  # prepare's config, before tuning
    for key, value in {"train.lr": "0.004", "train.max_steps": "60", "system.world_size": "2"}.items():
        client.log_param(training, key, value)
    for step, loss in enumerate((0.9, 0.5, 0.3)):
        client.log_metric(training, "val_loss", loss, step=step * 20)
    client.set_tag(training, "ctpipe.validation", "passed")
    client.set_tag(training, "ctpipe.content_key", "k1")  # the content run's own: not the pipeline run's
    client.log_text(training, "<html>Data Docs</html>", "validation/data_docs.html")
    client.log_text(training, "# Sanity\n", "sanity/sanity_report.md")
    client.log_text(training, "{}", "training/checkpoints.json")  # not a report: stays on the content run
    set_run_tag(uri, pipeline, TRAINING_RUN_TAG, training)

    for _ in range(2):  # a retried step copies the same again
        assert adopt_training_run(uri, pipeline, RetryPolicy(retries=0)) is True
    data = client.get_run(pipeline).data
    assert data.params["train.max_steps"] == "60" and data.params["system.world_size"] == "2"
    assert data.params["train.lr"] == "0.01" and data.params["trained.train.lr"] == "0.004"
    assert data.metrics["val_loss"] == 0.3  # the latest value; the curve stays on the content run
    assert data.tags["ctpipe.validation"] == "passed" and "ctpipe.content_key" not in data.tags
    listed = {entry.path for entry in client.list_artifacts(pipeline)}
    assert listed == {"validation", "sanity"}
    local = mlflow.artifacts.download_artifacts(run_id=pipeline, artifact_path="validation/data_docs.html",
                                                dst_path=str(tmp_path), tracking_uri=uri)
    assert Path(local).read_text() == "<html>Data Docs</html>"


def test_a_run_that_names_no_other_run_copies_nothing(tmp_path):
    uri, client, pipeline, _ = _runs(tmp_path)
    assert adopt_training_run(uri, pipeline) is False  # no tag (caching off, or a home from before)
    set_run_tag(uri, pipeline, TRAINING_RUN_TAG, pipeline)  # caching off: its steps logged to it
    assert adopt_training_run(uri, pipeline) is False
    assert adopt_training_run("", pipeline) is False


def test_a_content_run_gone_warns_and_leaves_the_step_alone(tmp_path, capsys):
    uri, client, pipeline, training = _runs(tmp_path)
    set_run_tag(uri, pipeline, TRAINING_RUN_TAG, "0" * 32)
    assert adopt_training_run(uri, pipeline, RetryPolicy(retries=0)) is False
    assert "were not copied" in capsys.readouterr().err
