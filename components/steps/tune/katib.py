"""Trials as a Katib Experiment: on a cluster with Katib, the search is Katib's, each trial a TrainJob.

Katib's suggestion service draws the values (``sobol`` for quasi-random, ``random``, ``grid`` over the same grid
``space.py`` makes) and its trial controller creates one TrainJob per trial from the template
(``components/lib/kube/katib.py``): the worker's own command with the values in ``KUBEFLOW_TRAINER_OPT_*``
variables and its checkpoints in ``<shared volume>/tune/<experiment>/<trial>/``, where this step, mounting the
same volume, reads each trial's ``train_result.json`` as for any trial. Trial 0 (the configured values: Katib
cannot be given a fixed point) runs beside it through the train step's launcher, as with ``tune.engine: jobs``.

The Experiment's name is derived from the step's job name, so a retried step re-attaches to it (only to one with
ctpipe's labels and this step's launch annotation) instead of starting the search again; SIGTERM deletes it
(Katib deletes its trials and their TrainJobs with it).
"""

from __future__ import annotations

import math
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ctpipe.components.lib.config import Config, SearchDimension
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.kube import katib
from ctpipe.components.lib.kube.api import default_api_client
from ctpipe.components.lib.kube.names import to_dns1035
from ctpipe.components.lib.kube.namespace import resolve_namespace
from ctpipe.components.lib.kube.pod import LAUNCH_ANNOTATION, JobValidationError
from ctpipe.components.lib.kube.retry import retry_call
from ctpipe.components.lib.kube.staging import plan_staging, stage_in
from ctpipe.components.run_config.trial import env_name, parameter_name, value_text
from ctpipe.components.steps.tune.space import SearchPlan, TrialPlan, grid_values
from ctpipe.components.steps.tune.trials import (
    DriverTrial,
    TrialJob,
    TrialOutcome,
    driver_command,
    read_outcome,
)

ALGORITHM = {"quasi_random": "sobol", "random": "random", "grid": "grid"}
WORKER_MODULE = "ctpipe.components.steps.train.worker"  # what every rank runs (the train step's contract)
PERMANENT_FAILURE_ENV = "CTPIPE_PERMANENT_FAILURE_FILE"  # where a rank says a restart would fail the same way
FAILURE_FILE = "permanent_failure.json"
POLL_SECONDS = 5.0  # between reads of the Experiment's status


@dataclass
class TrialLaunch:
    """What every rank of a Katib trial runs (a ``RankLaunch``: the TrainJob builder's input)."""

    job_name: str
    world_size: int
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    deadline_seconds: int = 3600


def experiment_name(job_name: str) -> str:
    """The Experiment of a step's search: deterministic, so a retried step finds it; short enough that its trials'
    TrainJobs (``<experiment>-<8>``) are named as every ctpipe TrainJob may be."""
    return to_dns1035(f"ctpipe-tune-{job_name}", max_length=katib.MAX_EXPERIMENT_NAME)


def katib_parameters(config: Config) -> list[katib.KatibParameter]:
    """``tune.space`` as Katib parameters (a grid: each range's grid points as a list, as ``space.py`` makes it)."""
    out = []
    for key, d in config.tune.dimensions().items():
        name = parameter_name(key)
        if config.tune.sampler == "grid" or d.kind == "choice":
            values = grid_values(d, config.tune.grid_points) if config.tune.sampler == "grid" else d.values
            out.append(katib.KatibParameter(name, "categorical", values=tuple(value_text(v) for v in values)))
        else:
            bound = (lambda v: str(int(v))) if d.integer else value_text
            out.append(katib.KatibParameter(name, "int" if d.integer else "double", low=bound(float(d.low)),
                                            high=bound(float(d.high)), log=d.log))
    return out


def trial_launch(config: Config, base: Config, snapshot: str, root: Path, launch_name: str) -> TrialLaunch:
    """The template of every trial: the worker on the staged snapshot, its checkpoints in the trial's folder."""
    trial_dir = f"{root}/{katib.placeholder(katib.TRIAL_NAME_PARAMETER)}"
    threads = str(base.train.threads_per_worker)
    env = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "MLFLOW_DISABLE_TELEMETRY": "true",
           PERMANENT_FAILURE_ENV: f"{trial_dir}/{FAILURE_FILE}",
           **{env_name(key): katib.placeholder(parameter_name(key)) for key in config.tune.space}}
    return TrialLaunch(job_name=launch_name, world_size=base.train.workers, env=env,
                       deadline_seconds=base.train.deadline_seconds,
                       command=["python", "-m", WORKER_MODULE, "--snapshot", snapshot, "--checkpoints",
                                f"{trial_dir}/checkpoints", "--config-json", base.to_json()])


def typed_values(config: Config, texts: dict[str, str]) -> dict[str, Any]:
    """A Katib trial's assignments (parameter name -> text) as config key -> value."""
    out: dict[str, Any] = {}
    for key, d in config.tune.dimensions().items():
        text = texts.get(parameter_name(key))
        if text is not None:
            out[key] = _typed(d, text, config)
    return out


def _typed(d: SearchDimension, text: str, config: Config) -> Any:
    choices = grid_values(d, config.tune.grid_points) if config.tune.sampler == "grid" else d.values
    for value in choices if (d.kind == "choice" or config.tune.sampler == "grid") else ():
        if value_text(value) == text:
            return value
    return int(float(text)) if d.integer else float(text)


class KatibSearch:
    """One Experiment in the step's namespace: created or re-attached, followed, its trials read."""

    def __init__(self, config: Config, *, api_client: client.ApiClient | None = None, namespace: str | None = None,
                 emit: Callable[[str], None] = print, poll_seconds: float | None = None, backoff_seconds: float = 1.0) -> None:
        self.config, self.kube = config, config.kubernetes
        self.namespace = namespace or resolve_namespace(self.kube.namespace)
        self.api = client.CustomObjectsApi(api_client or default_api_client())
        self.emit, self.backoff_seconds = emit, backoff_seconds
        self.poll_seconds = poll_seconds or POLL_SECONDS

    def _call(self, call: Callable[[], Any]) -> Any:
        return retry_call(call, attempts=6, backoff_seconds=self.backoff_seconds, on_retry=self.emit)

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._call(lambda: self.api.get_namespaced_custom_object(katib.GROUP, katib.VERSION, self.namespace,
                                                                            katib.PLURAL, name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create_or_attach(self, experiment: dict[str, Any]) -> None:
        name = experiment["metadata"]["name"]
        existing = self.get(name)
        if existing is not None:
            launch = ((existing.get("metadata") or {}).get("annotations") or {}).get(LAUNCH_ANNOTATION)
            if launch != experiment["metadata"]["annotations"][LAUNCH_ANNOTATION]:
                raise TrainingError(f"Experiment {self.namespace}/{name} exists but was not created by this tune step "
                                    f"({LAUNCH_ANNOTATION}={launch!r}); it was left alone. Delete it if it is stale.")
            self.emit(f"re-attaching to existing Experiment {self.namespace}/{name} ({katib.experiment_phase(existing)})")
            return
        try:
            self._call(lambda: self.api.create_namespaced_custom_object(
                katib.GROUP, katib.VERSION, self.namespace, katib.PLURAL, experiment, field_validation="Strict"))
            self.emit(f"created Experiment {self.namespace}/{name}")
        except ApiException as err:
            if err.status != 409:  # 409: a concurrent attempt created it, so follow that one
                raise

    def follow(self, name: str, deadline_at: float) -> dict[str, Any]:
        """Poll the Experiment until it Succeeded or Failed; TrainingError past the deadline or when it is gone."""
        shown = ""
        while True:
            experiment = self.get(name)
            if experiment is None:
                raise TrainingError(f"Experiment {self.namespace}/{name} disappeared while the step waited")
            status = experiment.get("status") or {}
            now = f"{katib.experiment_phase(experiment)}: {status.get('trialsSucceeded', 0)} succeeded, " \
                  f"{status.get('trialsFailed', 0)} failed, {status.get('trialsRunning', 0)} running"
            if now != shown:
                self.emit(f"Experiment {self.namespace}/{name}: {now}")
                shown = now
            if katib.experiment_phase(experiment) in katib.CONDITIONS:
                return experiment
            if time.monotonic() > deadline_at:
                raise TrainingError(f"Experiment {self.namespace}/{name} did not finish within the search's budget; "
                                    "raise tune.total_seconds or tune.trial_seconds")
            time.sleep(self.poll_seconds)

    def trials(self, name: str) -> list[dict[str, Any]]:
        listed = self._call(lambda: self.api.list_namespaced_custom_object(
            katib.GROUP, katib.VERSION, self.namespace, katib.TRIALS, label_selector=f"{katib.LABEL_EXPERIMENT}={name}"))
        return sorted(listed.get("items") or [], key=lambda t: (t["metadata"].get("creationTimestamp", ""), t["metadata"]["name"]))

    def delete(self, name: str) -> None:
        try:
            self.api.delete_namespaced_custom_object(katib.GROUP, katib.VERSION, self.namespace, katib.PLURAL, name,
                                                     propagation_policy="Foreground")
            self.emit(f"deleted Experiment {self.namespace}/{name} (and with it its trials and their TrainJobs)")
        except ApiException as err:
            if err.status != 404:
                self.emit(f"could not delete Experiment {self.namespace}/{name}: {err.status} {err.reason}")


def run_katib_experiment(plan: SearchPlan, jobs: list[TrialJob], snapshot_dir: str, config: Config, *,
                         tracking_uri: str | None, job_name: str, search: KatibSearch | None = None) -> list[TrialOutcome]:
    """Run the search as a Katib Experiment (trial 0 beside it through the launcher); every trial's outcome."""
    kube, tune = config.kubernetes, config.tune
    if not kube.shared_pvc:
        raise JobValidationError("tune.engine=katib needs kubernetes.shared_pvc: the trials' TrainJobs and this step "
                                 "share their snapshot and results on that ReadWriteMany volume")
    search = search or KatibSearch(config)
    name = experiment_name(job_name)
    root = Path(kube.shared_mount_path) / "tune" / name
    staging = plan_staging(["python", snapshot_dir], kube.shared_mount_path, name)  # the train step's staging
    stage_in(staging)
    sampled = [t for t in plan.trials if not t.baseline]
    launch = trial_launch(config, plan.base, staging.command[1], root, job_name)
    experiment = katib.build_experiment(
        replace(kube, namespace=search.namespace), launch, name=name, parameters=katib_parameters(config),
        algorithm=ALGORITHM[tune.sampler], seed=tune.seed, metric=config.select.metric, direction=config.select.direction,
        max_trials=len(sampled), parallel=tune.parallel_trials, max_failed=tune.failure_limit())
    sample = {parameter_name(k): value_text(v) for k, v in (sampled[0].values if sampled else {}).items()}
    katib.validate_experiment(experiment, sample)
    baseline = [job for job in jobs if job.plan.baseline]
    running = [DriverTrial(job, driver_command(job, snapshot_dir, plan.base, tracking_uri=tracking_uri),
                           config.select.metric) for job in baseline]
    rounds = math.ceil(len(sampled) / max(tune.parallel_trials, 1)) + 1
    budget = tune.total_seconds or rounds * (tune.trial_seconds or plan.base.train.deadline_seconds)
    try:
        search.create_or_attach(experiment)
        search.follow(name, time.monotonic() + budget)
    except BaseException:
        search.delete(name)
        for trial in running:
            trial.stop("the search was stopped")
        raise
    outcomes = [_wait(trial) for trial in running]
    for index, trial in enumerate(search.trials(name), start=len(outcomes)):
        outcomes.append(katib_outcome(config, trial, root, index))
        shutil.rmtree(root / trial["metadata"]["name"] / "checkpoints", ignore_errors=True)  # as for every trial
    return outcomes


def _wait(trial: DriverTrial) -> TrialOutcome:
    while (outcome := trial.poll()) is None:
        time.sleep(0.5)
    return outcome


def katib_outcome(config: Config, trial: dict[str, Any], root: Path, index: int) -> TrialOutcome:
    """A Katib trial's outcome: its values from its assignments, its objective from its job's result file."""
    name = trial["metadata"]["name"]
    job = TrialJob(TrialPlan(index, typed_values(config, katib.trial_values(trial))), name, root / name)
    status = trial.get("status") or {}
    seconds = _seconds(status.get("startTime"), status.get("completionTime"))
    state = katib.trial_state(trial)
    outcome = read_outcome(job, 0 if state == "Succeeded" else 1, seconds, config.select.metric)
    if outcome.status == "failed":
        said = _read_text(job.directory / FAILURE_FILE)
        condition = next((c for c in reversed(status.get("conditions") or []) if c.get("status") == "True"), {})
        outcome.error = said or f"Katib trial {name}: {state} ({condition.get('reason', '')}: {condition.get('message', '')})"
        outcome.status = "diverged" if "non-finite" in (said or "") else "failed"
    return outcome


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()[:2000]
    except OSError:
        return None


def _seconds(start: str | None, end: str | None) -> float:
    try:
        parse = lambda t: datetime.fromisoformat(str(t).replace("Z", "+00:00"))  # noqa: E731
        return max((parse(end) - parse(start)).total_seconds(), 0.0)
    except (TypeError, ValueError):
        return 0.0
