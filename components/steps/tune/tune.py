"""The tune step: search the space (``tune``), each trial a training job judged on the validation split, and hand
training the configuration of the best trial.

``tune_hyperparameters`` plans the trials (``space.py``: every trial checked as a whole config first), puts each
trial's values through the sanity gate's checks (``gating.py``: a refused trial is recorded, never trained), runs
them (``trials.py``: processes of the train step's launcher, locally or as cluster jobs; ``katib.py``: a Katib
Experiment whose trials are TrainJobs), chooses the best trial that succeeded by ``select.metric`` in its
direction (a diverged, failed or gate-refused trial never), and writes the report (``report.py``). What it returns is the
config training gets: the chosen values applied, validated like any override, and the search recorded in
``tune.chosen`` (so the registered version's lineage holds both). The candidate it trains is selected,
evaluated against the champion and blessed as any other, and the train step refuses tuned values the sanity
gate did not pass: tuning never bypasses the gate. No trial reads the
test split: a trial's worker reads the snapshot's train and validation splits only, as training does.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.tracking import RetryPolicy
from ctpipe.components.run_config.trial import env_name, trial_config
from ctpipe.components.steps.tune.gating import gate_jobs, gate_outcomes
from ctpipe.components.steps.tune.report import boundary_warnings, render_report
from ctpipe.components.steps.tune.space import SearchPlan, plan_search
from ctpipe.components.steps.tune.trial_runs import close_trial_runs, log_search, open_trial_runs
from ctpipe.components.steps.tune.trials import (
    DriverTrial,
    TrialJob,
    TrialOutcome,
    driver_command,
    run_trials,
)

GATE_ACCEPTS = ("passed", "skipped")  # the sanity gate's verdicts a chosen trial may have


@dataclass
class TuneResult:
    """The config training gets, every trial's outcome, the chosen one, and the summary ``summary.json`` keeps."""

    config: Config
    outcomes: list[TrialOutcome]
    chosen: TrialOutcome | None
    summary: dict[str, Any]


def trial_job_name(job_name: str, index: int) -> str:
    """A trial's job name: the step's, numbered (deterministic, so a retried step re-attaches to its jobs)."""
    return f"{job_name}-t{index:03d}"


def choose(outcomes: list[TrialOutcome], direction: str) -> TrialOutcome | None:
    """The succeeded trial with the best objective (ties: the earlier trial, so the configured values win a tie),
    among those whose values passed the sanity gate (``skipped``: the config turns the gate off)."""
    scored = [o for o in outcomes if o.status == "succeeded" and o.objective is not None
              and o.gate in GATE_ACCEPTS]
    if not scored:
        return None
    sign = -1.0 if direction == "max" else 1.0
    return min(scored, key=lambda o: (sign * o.objective, o.index))  # type: ignore[operator]


def tune_hyperparameters(
    snapshot_dir: str,
    work_dir: str,
    config: Config,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
    job_name: str,
    report_path: str | None = None,
    engine: str | None = None,
) -> TuneResult:
    """Run the search of ``config.tune`` on the snapshot (trials under ``work_dir``) and return its result.

    ``tune.trials == 0``: no search, ``config`` unchanged. Raises ``ConfigError`` (before any trial) for a space
    that makes an invalid config, ``TrainingError`` when too many trials failed or none succeeded.
    """
    if config.tune.trials == 0:
        if report_path:  # a pipeline compiled with the step, run with tune.trials=0: a page that says so
            atomic_write_text(report_path, "<html><body><p>No hyperparameter search: tune.trials=0.</p></body></html>")
        return TuneResult(config, [], None, {"trials": [], "chosen": {}})
    began = time.monotonic()
    plan = plan_search(config)
    metric, direction = config.select.metric, config.select.direction
    retry = RetryPolicy.of(config.registry)
    root = Path(work_dir)
    engine = engine or trial_engine(config)
    print(f"[tune] {len(plan.trials)} trials ({config.tune.sampler}) of {', '.join(config.tune.space)}, "
          f"{config.tune.parallel_trials} at a time, as {engine} jobs; objective {metric} ({direction}) on validation",
          flush=True)
    names = [(t.index, trial_job_name(job_name, t.index), t.values) for t in plan.trials]
    # Katib names its trials itself: their runs are opened once they exist; trial 0 runs beside it as a job.
    runs = open_trial_runs(tracking_uri, mlflow_run_id, [n for n, t in zip(names, plan.trials, strict=True)
                                                         if engine != "katib" or t.baseline], retry)
    jobs = [TrialJob(t, name, root / f"trial-{t.index:03d}", runs.get(t.index)) for t, (_, name, _) in zip(plan.trials, names, strict=True)]
    if engine == "katib":
        from ctpipe.components.steps.tune.katib import run_katib_experiment

        outcomes = run_katib_experiment(plan, jobs, snapshot_dir, config, tracking_uri=tracking_uri, job_name=job_name)
        later = open_trial_runs(tracking_uri, mlflow_run_id, [(o.index, o.job_name, o.values) for o in outcomes
                                                              if o.mlflow_run_id is None], retry)
        for outcome in outcomes:
            outcome.mlflow_run_id = outcome.mlflow_run_id or later.get(outcome.index)
        # Katib draws the values itself: its trials are gated once they are known, before any is chosen.
        gating = time.monotonic()
        outcomes = gate_outcomes(outcomes, snapshot_dir, plan.base, root)
        gate_seconds = time.monotonic() - gating
    else:
        # Each trial's values through the sanity gate first: a refused trial is recorded and never trained.
        gating = time.monotonic()
        jobs, refused = gate_jobs(jobs, snapshot_dir, plan.base, root)
        gate_seconds = time.monotonic() - gating
        ran = run_trials(
            jobs, lambda job: DriverTrial(job, driver_command(job, snapshot_dir, plan.base, tracking_uri=tracking_uri), metric),
            parallel=config.tune.parallel_trials, failure_limit=config.tune.failure_limit(),
            total_seconds=config.tune.total_seconds)
        outcomes = sorted([*ran, *refused], key=lambda o: o.index)
    close_trial_runs(tracking_uri, outcomes, metric, retry)
    for job in jobs:  # the candidate trains anew: the trials' checkpoints would only fill the artifact store
        shutil.rmtree(job.checkpoints, ignore_errors=True)
    chosen = choose(outcomes, direction)
    warnings = boundary_warnings(config.tune.dimensions(), chosen)
    seconds = time.monotonic() - began
    summary = search_summary(plan, outcomes, chosen, warnings, metric=metric, direction=direction, engine=engine,
                             seconds=seconds)
    summary["gate_seconds"] = round(gate_seconds, 2)  # the trials' sanity gate, all of them (gating.py)
    summary["report"] = str(Path(report_path).resolve()) if report_path and "://" not in report_path else report_path
    if report_path:
        render_report(report_path, config, outcomes, chosen, warnings, metric=metric, direction=direction, seconds=seconds)
    log_search(tracking_uri, mlflow_run_id, summary, Path(report_path) if report_path else None, retry)
    for warning in warnings:
        print(f"[tune] WARNING: {warning}", flush=True)
    failed = [o for o in outcomes if o.status == "failed"]
    if len(failed) > config.tune.failure_limit() or chosen is None:
        why = (f"{len(failed)} trials failed (tune.max_failed_trials={config.tune.failure_limit()})"
               if failed else "no trial succeeded with values that passed the sanity gate")
        errors = "; ".join(f"trial {o.index}: {o.error}" for o in outcomes if o.error)[:4000]
        raise TrainingError(f"the hyperparameter search failed: {why}. {errors}")
    return TuneResult(tuned_config(config, chosen, summary), outcomes, chosen, summary)


def tuned_config(config: Config, chosen: TrialOutcome, summary: dict[str, Any]) -> Config:
    """``config`` with the chosen values (validated as overrides are) and the search recorded in ``tune.chosen``."""
    tuned = trial_config(config, chosen.values)
    tuned.tune.chosen = {k: summary[k] for k in ("chosen", "metric", "direction", "sampler", "seed", "search")}
    return Config.from_json(tuned.to_json())


def search_summary(plan: SearchPlan, outcomes: list[TrialOutcome], chosen: TrialOutcome | None, warnings: list[str],
                   *, metric: str, direction: str, engine: str, seconds: float) -> dict[str, Any]:
    """What ``summary.json`` and the lineage keep of the search: one record per trial and the chosen values."""
    tune = plan.base.tune
    return {
        "metric": metric,
        "direction": direction,
        "sampler": tune.sampler,
        "seed": tune.seed,
        "engine": engine,
        "seconds": round(seconds, 2),
        "space": {key: d.text() for key, d in tune.dimensions().items()},
        "roles": {key: tune.role_of(key) for key in [*tune.space, *tune.fixed]},
        "variables": {key: env_name(key) for key in tune.space},
        "trials": [{k: v for k, v in o.to_dict().items() if k != "final_metrics"} for o in outcomes],
        "chosen": {"trial": chosen.index, "values": dict(chosen.values), "objective": chosen.objective,
                   "baseline": chosen.baseline, "gate": chosen.gate} if chosen else {},
        "baseline_objective": next((o.objective for o in outcomes if o.baseline), None),
        "boundary_warnings": warnings,
        # The compact record the tuned config carries into the lineage.
        "search": [{"trial": o.index, "values": o.values, "objective": o.objective, "status": o.status,
                    "gate": o.gate} for o in outcomes],
    }


def trial_engine(config: Config) -> str:
    """Where the trials run: ``local`` processes for a local backend; on a cluster ``katib`` (a Katib Experiment
    of TrainJob trials) when ``tune.engine`` says so, or ``auto`` finds Katib and TrainJob served, else ``jobs``
    (each trial the train step's launcher: TrainJob or PyTorchJob)."""
    if config.train.backend == "local":
        return "local"
    if config.tune.engine != "auto":
        return config.tune.engine
    if config.train.backend == "pytorchjob":  # Katib's trials are TrainJobs here
        return "jobs"
    from ctpipe.components.lib.kube.api import default_api_client
    from ctpipe.components.lib.kube.discovery import katib_installed

    return "katib" if katib_installed(default_api_client(), config.kubernetes.trainjob_runtime) else "jobs"
