"""Trials as real training jobs: up to ``tune.parallel_trials`` at once, each the train step's own job.

A trial runs ``python -m ctpipe.components.steps.train.launch`` (the train step's launcher as a command: local
processes, or a TrainJob/PyTorchJob on a cluster, re-attached by its name when the step is retried) with the
trial's values in ``KUBEFLOW_TRAINER_OPT_*`` variables, which every rank reads (the OptimizationJob contract).
Its outcome is read from what the job leaves in the trial's folder: ``train_result.json`` (the best checkpoint
by ``select.metric``, evaluated on the validation split) or the job's error. A trial that diverged (a non-finite
loss or gradient, a non-finite objective) or failed is recorded and never chosen; more failures than
``tune.failure_limit()`` stop the search; the total budget stops it too (running trials are stopped).

Each finished trial's outcome is written to ``trial-NNN/outcome.json``: a retried step keeps the trials that
finished and starts the others again (their jobs resume from their checkpoints).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.warm_start import warm_command
from ctpipe.components.run_config.trial import trial_env
from ctpipe.components.steps.tune.space import TrialPlan

OUTCOME_FILE = "outcome.json"
LOG_FILE = "trial.log"
RESULT_FILE = "train_result.json"  # what the worker's rank 0 writes beside the checkpoints (train step's contract)
DRIVER_MODULE = "ctpipe.components.steps.train.launch"
POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 10.0
# The trainer's words for a loss or gradient that left the finite numbers (components/engine/trainer.py).
DIVERGED_MARKER = "non-finite"
# Outcomes a retried step keeps; the others run again. (gate_failed: the sanity gate refused the trial's values.)
FINAL = ("succeeded", "diverged", "gate_failed")


@dataclass
class TrialOutcome:
    """What one trial did: its values, status, objective on the validation split, time, and why it failed."""

    index: int
    values: dict[str, Any]
    status: str  # succeeded, diverged, gate_failed, failed, stopped, not_started
    job_name: str
    baseline: bool = False
    gate: str | None = None  # the sanity gate's verdict on the trial's values: passed, skipped, failed
    objective: float | None = None
    best_step: int | None = None
    steps: int | None = None
    seconds: float = 0.0
    final_metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    mlflow_run_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrialOutcome:
        return cls(**{k: v for k, v in values.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class TrialJob:
    """A trial as a job: its plan, deterministic job name, folder (checkpoints, log, outcome), MLflow run."""

    plan: TrialPlan
    job_name: str
    directory: Path
    mlflow_run_id: str | None = None
    gate: str | None = None  # the sanity gate's verdict on its values (gating.py), recorded with its outcome

    @property
    def checkpoints(self) -> Path:
        return self.directory / "checkpoints"

    def outcome(self, status: str, **fields: Any) -> TrialOutcome:
        return TrialOutcome(index=self.plan.index, values=dict(self.plan.values), status=status, job_name=self.job_name,
                            baseline=self.plan.baseline, mlflow_run_id=self.mlflow_run_id, gate=self.gate,
                            **fields)


class RunningTrial(Protocol):
    def poll(self) -> TrialOutcome | None:
        """The outcome once the trial has ended, else None."""

    def stop(self, reason: str) -> TrialOutcome:
        """Stop the trial (its job with it) and return its outcome, ``stopped`` with ``reason``."""


def driver_command(job: TrialJob, snapshot_dir: str, base: Config, *, tracking_uri: str | None) -> list[str]:
    """The command of one trial: the train step's launcher on the trial's folder, logging to its MLflow run."""
    command = [sys.executable, "-m", DRIVER_MODULE, "--snapshot", snapshot_dir, "--checkpoints", str(job.checkpoints),
               "--config-json", base.to_json(), "--job-name", job.job_name]
    if tracking_uri and job.mlflow_run_id:
        command += ["--tracking-uri", tracking_uri, "--mlflow-run-id", job.mlflow_run_id]
    return command


class DriverTrial:
    """One trial as a process (the train step's launcher); its output goes to the trial's ``trial.log``."""

    def __init__(self, job: TrialJob, command: list[str], metric: str) -> None:
        self.job, self.metric = job, metric
        job.directory.mkdir(parents=True, exist_ok=True)
        (job.checkpoints / RESULT_FILE).unlink(missing_ok=True)  # never read a previous attempt's result
        self.started = time.monotonic()
        env = {**os.environ, **trial_env(job.plan.values), "PYTHONUNBUFFERED": "1"}
        with open(job.directory / LOG_FILE, "ab") as log:  # the child holds its own descriptor
            self.proc = subprocess.Popen(warm_command(command), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)

    def poll(self) -> TrialOutcome | None:
        code = self.proc.poll()
        if code is None:
            return None
        return read_outcome(self.job, code, time.monotonic() - self.started, self.metric)

    def stop(self, reason: str) -> TrialOutcome:
        if self.proc.poll() is None:
            # The launcher stops its ranks (or deletes its cluster job) on SIGTERM.
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.job.outcome("stopped", seconds=round(time.monotonic() - self.started, 3), error=reason)


def read_outcome(job: TrialJob, exit_code: int, seconds: float, metric: str) -> TrialOutcome:
    """A finished trial's outcome from its job's result file, or from its exit code and log."""
    seconds = round(seconds, 3)
    result_path = job.checkpoints / RESULT_FILE
    if exit_code != 0 or not result_path.is_file():
        tail = log_tail(job.directory / LOG_FILE)
        status = "diverged" if DIVERGED_MARKER in tail else "failed"
        return job.outcome(status, seconds=seconds, error=_last_error(tail) or f"the trial's job exited with code {exit_code}")
    result = json.loads(result_path.read_text())
    best = result.get("best_checkpoint") or {}
    value = best.get("value")
    final = {k: float(v) for k, v in (result.get("final_metrics") or {}).items() if isinstance(v, int | float)}
    objective = float(value) if isinstance(value, int | float) else None
    fields = dict(seconds=seconds, steps=result.get("steps"), best_step=best.get("step"), final_metrics=final)
    if best.get("metric") != metric or objective is None:
        return job.outcome("failed", error=f"the trial reported no {metric} (best checkpoint: {best or None})", **fields)
    if not math.isfinite(objective) or not all(math.isfinite(v) for v in final.values()):
        return job.outcome("diverged", objective=None, error=f"non-finite validation metrics: {final}", **fields)
    return job.outcome("succeeded", objective=objective, **fields)


def log_tail(path: Path, limit: int = 8000) -> str:
    """The end of a trial's log (empty when it wrote none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(f.seek(0, os.SEEK_END) - limit, 0))
            return f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _last_error(tail: str) -> str | None:
    """The launcher's one-line error (``TrainingError: ...``), else the last non-empty line."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(("TrainingError:", "ConfigError:", "UserError:")) or "failed:" in line:
            return line[:2000]
    return lines[-1][:2000] if lines else None


def finished_outcome(job: TrialJob) -> TrialOutcome | None:
    """The outcome an earlier attempt of the step recorded for ``job`` when it is final and for the same values."""
    path = job.directory / OUTCOME_FILE
    try:
        outcome = TrialOutcome.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    same = json.dumps(outcome.values, sort_keys=True) == json.dumps(job.plan.values, sort_keys=True)
    return outcome if same and outcome.status in FINAL else None


def record(job: TrialJob, outcome: TrialOutcome) -> None:
    atomic_write_text(job.directory / OUTCOME_FILE, json.dumps(outcome.to_dict(), indent=1, sort_keys=True))


def run_trials(
    jobs: Sequence[TrialJob],
    start: Callable[[TrialJob], RunningTrial],
    *,
    parallel: int,
    failure_limit: int,
    total_seconds: float | None,
    emit: Callable[[str], None] = print,
) -> list[TrialOutcome]:
    """Run ``jobs`` ``parallel`` at a time; every trial's outcome, in trial order (a trial the search did not
    start: ``not_started``). Stops when more than ``failure_limit`` trials failed or ``total_seconds`` ran out."""
    outcomes: dict[int, TrialOutcome] = {}
    for job in jobs:
        if (kept := finished_outcome(job)) is not None:
            outcomes[job.plan.index] = kept
            emit(f"[tune] trial {job.plan.index}: {kept.status} in an earlier attempt (kept)")
    pending = deque(job for job in jobs if job.plan.index not in outcomes)
    running: dict[int, tuple[TrialJob, RunningTrial]] = {}
    began = time.monotonic()
    stop_reason: str | None = None
    with _sigterm_stops(running):
        while (pending or running) and stop_reason is None:
            while pending and len(running) < parallel:
                job = pending.popleft()
                emit(f"[tune] trial {job.plan.index} started: {_values_text(job.plan.values)}")
                running[job.plan.index] = (job, start(job))
            for index, (job, trial) in list(running.items()):
                if (outcome := trial.poll()) is not None:
                    del running[index]
                    _finish(job, outcome, outcomes, emit)
            failed = sum(o.status == "failed" for o in outcomes.values())
            if failed > failure_limit:
                stop_reason = f"the search stopped: {failed} trials failed (tune.max_failed_trials={failure_limit})"
            elif total_seconds is not None and time.monotonic() - began > total_seconds and (pending or running):
                stop_reason = f"the search stopped: its total budget of {total_seconds:.0f} s (tune.total_seconds) ran out"
            elif pending or running:
                time.sleep(POLL_SECONDS)
        if stop_reason:
            emit(f"[tune] {stop_reason}")
            for job, trial in list(running.values()):
                _finish(job, trial.stop(stop_reason), outcomes, emit)
            for job in pending:
                outcomes[job.plan.index] = job.outcome("not_started", error=stop_reason)
    return [outcomes[job.plan.index] for job in jobs]


def _finish(job: TrialJob, outcome: TrialOutcome, outcomes: dict[int, TrialOutcome], emit: Callable[[str], None]) -> None:
    outcomes[job.plan.index] = outcome
    record(job, outcome)
    shown = f" {outcome.objective:.6g}" if outcome.objective is not None else ""
    emit(f"[tune] trial {job.plan.index} {outcome.status}{shown} in {outcome.seconds:.1f} s"
         + (f": {outcome.error}" if outcome.error and outcome.status != "succeeded" else ""))


def _values_text(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items()) or "(configured values)"


@contextmanager
def _sigterm_stops(running: dict[int, tuple[TrialJob, RunningTrial]]) -> Iterator[None]:
    """SIGTERM (KFP cancels a step so) stops the running trials, each job with its trial, before the step ends."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except BaseException:
        for _, (job, trial) in list(running.items()):
            record(job, trial.stop("the step was stopped"))
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
