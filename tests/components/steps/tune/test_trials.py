"""Running trials: at most parallel_trials at once, the failure limit and the total budget stop the search, a
finished trial is kept by a retried step, and a trial's outcome is read from what its job left."""

from __future__ import annotations

import json
import time

import pytest

from ctpipe.components.steps.tune.space import TrialPlan
from ctpipe.components.steps.tune.trials import (
    LOG_FILE,
    RESULT_FILE,
    TrialJob,
    TrialOutcome,
    read_outcome,
    record,
    run_trials,
)


class Scripted:
    """A trial whose end is scripted: ``status`` after ``polls`` polls (the scheduler under test starts and stops it)."""

    live: set[int] = set()
    most = 0

    def __init__(self, job: TrialJob, status: str, polls: int = 2) -> None:
        self.job, self.status, self.polls = job, status, polls
        Scripted.live.add(job.plan.index)
        Scripted.most = max(Scripted.most, len(Scripted.live))

    def poll(self):
        self.polls -= 1
        if self.polls > 0:
            return None
        Scripted.live.discard(self.job.plan.index)
        return self.job.outcome(self.status, objective=0.5 if self.status == "succeeded" else None, seconds=0.01)

    def stop(self, reason):
        Scripted.live.discard(self.job.plan.index)
        return self.job.outcome("stopped", error=reason)


@pytest.fixture(autouse=True)
def _fresh():
    Scripted.live, Scripted.most = set(), 0


def jobs(tmp_path, n):
    return [TrialJob(TrialPlan(i, {"train.lr": 0.001 * (i + 1)}), f"job-t{i:03d}", tmp_path / f"trial-{i:03d}") for i in range(n)]


def test_no_more_than_parallel_trials_run_at_once(tmp_path):
    outcomes = run_trials(jobs(tmp_path, 5), lambda job: Scripted(job, "succeeded"), parallel=2, failure_limit=0,
                          total_seconds=None, emit=lambda _: None)
    assert [o.status for o in outcomes] == ["succeeded"] * 5
    assert Scripted.most == 2


def test_more_failures_than_allowed_stop_the_search(tmp_path):
    script = {0: "failed", 1: "diverged", 2: "failed", 3: "succeeded", 4: "succeeded"}
    outcomes = run_trials(jobs(tmp_path, 5), lambda job: Scripted(job, script[job.plan.index], polls=1 + job.plan.index),
                          parallel=1, failure_limit=1, total_seconds=None, emit=lambda _: None)
    # A diverged trial is recorded and is no failure of the search; the second failure stops it.
    assert [o.status for o in outcomes] == ["failed", "diverged", "failed", "not_started", "not_started"]
    assert "tune.max_failed_trials=1" in outcomes[3].error


def test_the_total_budget_stops_running_trials_and_starts_no_more(tmp_path):
    never = lambda job: Scripted(job, "succeeded", polls=10**9)  # noqa: E731
    began = time.monotonic()
    outcomes = run_trials(jobs(tmp_path, 3), never, parallel=2, failure_limit=3, total_seconds=0.3, emit=lambda _: None)
    assert time.monotonic() - began < 5
    assert [o.status for o in outcomes] == ["stopped", "stopped", "not_started"]
    assert "total budget" in outcomes[0].error and not Scripted.live


def test_a_retried_step_keeps_finished_trials_and_runs_the_others(tmp_path):
    first = jobs(tmp_path, 3)
    record(first[0], first[0].outcome("succeeded", objective=0.9))
    record(first[1], first[1].outcome("failed", error="node lost"))
    started = []
    outcomes = run_trials(first, lambda job: started.append(job.plan.index) or Scripted(job, "succeeded"), parallel=3,
                          failure_limit=0, total_seconds=None, emit=lambda _: None)
    assert started == [1, 2] and outcomes[0].objective == 0.9
    # Another space gives trial 0 other values: its old outcome is not taken for it.
    changed = [TrialJob(TrialPlan(0, {"train.lr": 0.5}), "job-t000", first[0].directory)]
    run_trials(changed, lambda job: started.append("again") or Scripted(job, "succeeded"), parallel=1, failure_limit=0,
               total_seconds=None, emit=lambda _: None)
    assert started[-1] == "again"


def write_result(job: TrialJob, metric: str, value: float, final: dict[str, float]) -> None:
    job.checkpoints.mkdir(parents=True)
    (job.checkpoints / RESULT_FILE).write_text(json.dumps(
        {"steps": 20, "best_checkpoint": {"step": 10, "metric": metric, "value": value}, "final_metrics": final}))


def test_an_outcome_is_read_from_the_job_s_result(tmp_path):
    job = jobs(tmp_path, 1)[0]
    write_result(job, "val_accuracy", 0.8, {"val_accuracy": 0.79, "val_loss": 0.5})
    outcome = read_outcome(job, 0, 3.2, "val_accuracy")
    assert (outcome.status, outcome.objective, outcome.best_step, outcome.steps) == ("succeeded", 0.8, 10, 20)
    assert TrialOutcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome


def test_a_non_finite_metric_or_loss_is_a_diverged_trial(tmp_path):
    job = jobs(tmp_path, 2)
    write_result(job[0], "val_accuracy", 0.5, {"val_accuracy": 0.5, "val_loss": float("nan")})
    assert read_outcome(job[0], 0, 1.0, "val_accuracy").status == "diverged"
    job[1].directory.mkdir()
    (job[1].directory / LOG_FILE).write_text("TrainingError: training job 'x' failed: rank 0 exited with code 2: "
                                             "TrainingError: non-finite loss at step 3\n")
    outcome = read_outcome(job[1], 1, 1.0, "val_accuracy")
    assert outcome.status == "diverged" and "non-finite loss at step 3" in outcome.error


def test_a_crash_is_a_failed_trial_with_the_launcher_s_error(tmp_path):
    job = jobs(tmp_path, 1)[0]
    job.directory.mkdir()
    (job.directory / LOG_FILE).write_text("noise\nTrainingError: training job 'x' failed: rank 1 exited with code 1: boom\n"
                                          "more noise\n")
    outcome = read_outcome(job, 1, 1.0, "val_accuracy")
    assert outcome.status == "failed" and outcome.error.startswith("TrainingError: training job 'x' failed")
