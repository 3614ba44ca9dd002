"""The MLflow run that cached steps log to, shared by the pipeline runs that reuse their results.

With caching on, validate, sanity, train and select take no per-run input (else KFP's cache would never
hit), so they cannot log to the pipeline run's own MLflow run. They log to a run keyed by the content
they depend on (``ctpipe.content_key``: data fingerprint, config, code); each pipeline run's own MLflow
run names it in ``ctpipe.training_run_id``. A failing cached step ends the pipeline runs that name it.

What a data scientist sees is one top-level MLflow run per pipeline run: the content run is created as a
nested child of the pipeline run that first needed it (``mlflow.parentRunId``), and ``adopt_training_run``
copies its params, latest metrics and reports onto each pipeline run that used it (a cached rerun too), so
the registered version's source run, the pipeline run, carries them. Homes from before keep their
top-level content runs; every reader follows ``ctpipe.training_run_id`` as before.
"""

from __future__ import annotations

import sys
import tempfile
import time

from ctpipe.components.lib.tracking.retry import RetryPolicy

CONTENT_KEY_TAG = "ctpipe.content_key"
TRAINING_RUN_TAG = "ctpipe.training_run_id"
PARENT_RUN_TAG = "mlflow.parentRunId"  # MLflow's own: the UI nests a run under its parent
# The content run's reports that the pipeline run gets a copy of (Data Docs, sanity report, tuning report).
REPORT_DIRS = ("validation", "sanity", "tune")
# The gates' verdicts, as the steps tag the run they log to.
VERDICT_TAGS = ("ctpipe.validation", "ctpipe.sanity")
# A param of the content run whose value differs from the pipeline run's (a tuned learning rate): kept
# beside it under this prefix, since MLflow params cannot change.
TRAINED_PREFIX = "trained."


def adopt_training_run(tracking_uri: str, pipeline_run_id: str, retry: RetryPolicy | None = None) -> bool:
    """Copy the content run that ``pipeline_run_id`` names onto it: the params it lacks, the latest value of each
    metric, the gates' verdict tags and the reports under ``REPORT_DIRS``. False when it names none (caching off:
    the steps logged to it directly) or MLflow failed (warned on stderr: the copy is for reading, and the step's
    own results matter more). Idempotent: a retry re-sends the same values and overwrites the same files."""
    if not tracking_uri or not pipeline_run_id:
        return False
    from ctpipe.components.lib.tracking.retry import bounded_mlflow_http

    policy = retry or RetryPolicy()
    try:
        with bounded_mlflow_http():
            return policy.call(lambda: _copy_training_run(tracking_uri, pipeline_run_id),
                               f"copy the training results onto MLflow run {pipeline_run_id}")
    except Exception as err:  # noqa: BLE001 - never replaces the step's outcome
        print(f"ctpipe: warning: the training results were not copied onto MLflow run {pipeline_run_id} "
              f"(they stay on the run its tag {TRAINING_RUN_TAG} names): {type(err).__name__}: {err}",
              file=sys.stderr, flush=True)
        return False


def _copy_training_run(tracking_uri: str, pipeline_run_id: str) -> bool:
    import mlflow
    from mlflow.entities import Metric, Param, RunTag

    from ctpipe.components.lib.atomic_files import naming_path
    from ctpipe.components.lib.tracking.log_step import PARAMS_PER_BATCH

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    own = client.get_run(pipeline_run_id).data
    training_run_id = own.tags.get(TRAINING_RUN_TAG)
    if not training_run_id or training_run_id == pipeline_run_id:
        return False
    training = client.get_run(training_run_id).data
    params = [Param(k, v) for k, v in training.params.items() if k not in own.params]
    params += [Param(TRAINED_PREFIX + k, v) for k, v in training.params.items()
               if k in own.params and own.params[k] != v]
    # Latest values only: the curves stay on the content run, one click away in the UI.
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, 0) for k, v in training.metrics.items()]
    tags = [RunTag(k, training.tags[k]) for k in VERDICT_TAGS if k in training.tags]
    for start in range(0, max(len(params), len(metrics), len(tags)), PARAMS_PER_BATCH):
        client.log_batch(pipeline_run_id, metrics=metrics[start : start + PARAMS_PER_BATCH],
                         params=params[start : start + PARAMS_PER_BATCH], tags=tags[start : start + PARAMS_PER_BATCH])
    present = {entry.path for entry in client.list_artifacts(training_run_id)}
    with tempfile.TemporaryDirectory(prefix="ctpipe-adopt-") as tmp, naming_path(tmp):
        for folder in (name for name in REPORT_DIRS if name in present):
            local = mlflow.artifacts.download_artifacts(run_id=training_run_id, artifact_path=folder, dst_path=tmp,
                                                        tracking_uri=tracking_uri)
            client.log_artifacts(pipeline_run_id, local, folder)
    return True


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
    failed), with the gates' verdict tags copied onto them (the watcher reads a KFP run's verdicts from its
    pipeline run: a failed gate is the user's error, not one to retry); how many. Best effort, as
    ``end_pipeline_run``: the failing step's own error is what matters."""
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
    if linked:
        _copy_verdicts(tracking_uri, training_run_id, linked, quick)
    return sum(end_pipeline_run(tracking_uri, run_id, status, retry=quick) for run_id in linked)


def _copy_verdicts(tracking_uri: str, training_run_id: str, run_ids: list[str], retry: RetryPolicy) -> None:
    import mlflow

    from ctpipe.components.lib.tracking.retry import bounded_mlflow_http

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    try:
        with bounded_mlflow_http():
            tags = retry.call(lambda: client.get_run(training_run_id).data.tags, f"read MLflow run {training_run_id}")
            for run_id in run_ids:
                for key in (k for k in VERDICT_TAGS if k in tags):
                    retry.call(lambda r=run_id, k=key: client.set_tag(r, k, tags[k]), f"tag MLflow run {run_id}")
    except Exception:  # noqa: BLE001 - never replaces the step's outcome
        return


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
