"""The MLflow run that cached steps log to, shared by the pipeline runs that reuse their results.

With caching on, validate, sanity, train and select take no per-run input (else KFP's cache would never
hit), so they cannot log to the pipeline run's own MLflow run. They log to a run keyed by the content
they depend on (``ctpipe.content_key``: data fingerprint, config, code); each pipeline run's own MLflow
run names it in ``ctpipe.training_run_id``. A failing cached step ends the pipeline runs that name it.
"""

from __future__ import annotations

CONTENT_KEY_TAG = "ctpipe.content_key"
TRAINING_RUN_TAG = "ctpipe.training_run_id"


def set_run_tag(tracking_uri: str, run_id: str, key: str, value: str) -> None:
    """Set one tag on run ``run_id``."""
    import mlflow

    mlflow.MlflowClient(tracking_uri=tracking_uri).set_tag(run_id, key, value)


def running_runs_linked_to(tracking_uri: str, training_run_id: str) -> list[str]:
    """The RUNNING pipeline runs (of the training run's experiment) whose cached steps log to ``training_run_id``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    experiment_id = client.get_run(training_run_id).info.experiment_id
    runs = client.search_runs(
        [experiment_id],
        filter_string=f"tags.`{TRAINING_RUN_TAG}` = '{training_run_id}' and attributes.status = 'RUNNING'",
        max_results=100,
    )
    return [run.info.run_id for run in runs if run.info.run_id != training_run_id]


def end_linked_pipeline_runs(tracking_uri: str, training_run_id: str, status: str) -> int:
    """End ``status`` the RUNNING pipeline runs whose cached steps log to ``training_run_id`` (a cached step
    failed); how many. Best effort, as ``end_pipeline_run``: the failing step's own error is what matters."""
    from ctpipe.components.lib.tracking.retry import RetryPolicy, bounded_mlflow_http
    from ctpipe.components.lib.tracking.store import end_pipeline_run

    if not tracking_uri or not training_run_id:
        return 0
    quick = RetryPolicy(retries=1, backoff_seconds=0.5, max_backoff_seconds=0.5)
    try:
        with bounded_mlflow_http():
            linked = quick.call(lambda: running_runs_linked_to(tracking_uri, training_run_id),
                                f"find the pipeline runs of MLflow run {training_run_id}")
    except Exception:  # noqa: BLE001 - never replaces the step's outcome
        return 0
    return sum(end_pipeline_run(tracking_uri, run_id, status, retry=quick) for run_id in linked)


def finish_training_run_of(tracking_uri: str, pipeline_run_id: str) -> bool:
    """End FINISHED the training run that pipeline run ``pipeline_run_id`` names (its last step passed), so
    MLflow does not show it RUNNING forever; False when it names none or MLflow is unavailable (best effort)."""
    import mlflow

    from ctpipe.components.lib.tracking.retry import RetryPolicy, bounded_mlflow_http
    from ctpipe.components.lib.tracking.store import end_pipeline_run

    try:
        with bounded_mlflow_http():
            tags = RetryPolicy(retries=1, backoff_seconds=0.5, max_backoff_seconds=0.5).call(
                lambda: mlflow.MlflowClient(tracking_uri=tracking_uri).get_run(pipeline_run_id).data.tags,
                f"read the tags of MLflow run {pipeline_run_id}",
            )
    except Exception:  # noqa: BLE001 - the step passed; a status is not worth failing it
        return False
    training = tags.get(TRAINING_RUN_TAG)
    if not training or training == pipeline_run_id:
        return False
    return end_pipeline_run(tracking_uri, training, "FINISHED")
