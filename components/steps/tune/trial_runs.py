"""The search in MLflow: each trial a child run of the training run (its curves logged by the trial's rank 0),
and the search's report and summary on the training run itself.

A child run is found again by its job name (``ctpipe.tune.trial_job``), so a retried step logs to the same run.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctpipe.components.lib.tracking import RetryPolicy, bounded_mlflow_http, find_or_create_run, log_step
from ctpipe.components.steps.tune.trials import TrialOutcome

TRIAL_JOB_TAG = "ctpipe.tune.trial_job"
END_STATUS = {"succeeded": "FINISHED", "diverged": "FAILED", "gate_failed": "FAILED", "failed": "FAILED",
              "stopped": "KILLED"}


def open_trial_runs(tracking_uri: str | None, parent_run_id: str | None, trials: Sequence[tuple[int, str, dict[str, Any]]],
                    retry: RetryPolicy) -> dict[int, str]:
    """Trial index -> its MLflow child run (found by job name, else created), for ``(index, job name, values)``."""
    if not tracking_uri or not parent_run_id:
        return {}
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    with bounded_mlflow_http():
        experiment = retry.call(lambda: client.get_run(parent_run_id).info.experiment_id,
                                f"read MLflow run {parent_run_id}")
        runs = {}
        for index, job_name, values in trials:
            tags = {"mlflow.parentRunId": parent_run_id, "ctpipe.tune.trial": str(index),
                    "ctpipe.tune.values": json.dumps(values, sort_keys=True)}
            runs[index], _ = retry.call(
                lambda job=job_name, i=index, t=tags: find_or_create_run(
                    tracking_uri, experiment, key_tag=TRIAL_JOB_TAG, key=job, run_name=f"tune-trial-{i:03d}", tags=t),
                f"open the MLflow run of trial {index}")
    return runs


def close_trial_runs(tracking_uri: str | None, outcomes: Sequence[TrialOutcome], metric: str, retry: RetryPolicy) -> None:
    """Each trial's objective and status on its run, which then ends (FINISHED, FAILED or KILLED)."""
    if not tracking_uri:
        return
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    for outcome in outcomes:
        if not outcome.mlflow_run_id or outcome.status == "not_started":
            continue
        tags = {"ctpipe.tune.status": outcome.status, **({"ctpipe.tune.error": outcome.error[:5000]} if outcome.error else {})}
        log_step(tracking_uri, outcome.mlflow_run_id, "tune", metrics={f"tune_objective_{metric}": outcome.objective,
                                                                        "tune_trial_seconds": outcome.seconds},
                 tags=tags, retry=retry)
        with bounded_mlflow_http():
            retry.call(lambda run=outcome.mlflow_run_id, s=END_STATUS.get(outcome.status, "FINISHED"):
                       client.set_terminated(run, s), f"end the MLflow run of trial {outcome.index}")


def log_search(tracking_uri: str | None, run_id: str | None, summary: dict[str, Any], report: Path | None,
               retry: RetryPolicy) -> None:
    """The search's summary, report and chosen values on the training run."""
    chosen = summary.get("chosen") or {}
    tags = {"ctpipe.tune.chosen_trial": str(chosen.get("trial", "")),
            "ctpipe.tune.chosen": json.dumps(chosen.get("values", {}), sort_keys=True)[:5000]}
    metric = summary.get("metric", "objective")
    log_step(tracking_uri or "", run_id or "", "tune", tags=tags,
             metrics={f"tune_best_{metric}": chosen.get("objective"), "tune_trials": float(len(summary.get("trials", [])))},
             files={"tune/report.html": report} if report else None, documents={"tune/summary.json": summary},
             retry=retry)
