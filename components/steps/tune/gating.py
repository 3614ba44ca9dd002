"""Every trial through the sanity gate: the gate's own checks on the trial's config, before it trains.

The sanity step gated the configured values; a trial's ``train.*`` or ``task.options.*`` values change what the
gate's checks train and build (overfit one batch at the trial's learning rate, the loss at init of the trial's
model, gradients flowing through it). So the search runs the gate once more per trial, as a command (the sanity
step's ``trial_gate`` module: no step imports another), one process for all the trials. A trial the gate refuses
is recorded ``gate_failed`` with the gate's message and never trained or chosen; a passed trial's outcome says
``gate: passed``, and the chosen one's verdict travels to training in ``tune.chosen``, which the train step checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.warm_start import warm_command
from ctpipe.components.run_config.trial import OPT_ENV_PREFIX
from ctpipe.components.steps.tune.trials import TrialJob, TrialOutcome, finished_outcome, log_tail, record

GATE_MODULE = "ctpipe.components.steps.sanity_checks.trial_gate"  # the sanity step's contract, run as a command
VERDICT_FILE = "gate.json"  # what the gate writes in each trial's gate folder
GATE_FOLDER = "gate"
GATE_LOG = "gate.log"
GATE_ROOT = "sanity-gate"  # under the step's trials folder: the gate's list of trials and its log


def gate_state(verdict: dict[str, Any]) -> str:
    """``passed``, ``skipped`` (``sanity.enabled`` is off) or ``failed``."""
    return "skipped" if verdict.get("skipped") else "passed" if verdict.get("passed") else "failed"


def gate_trials(trials: Sequence[tuple[int, dict[str, Any], Path]], snapshot_dir: str, base: Config,
                root: Path) -> dict[int, dict[str, Any]]:
    """Trial index -> the gate's verdict (``passed``, ``skipped``, ``failed_checks``, ``message``, ``seconds``) for
    ``(index, values, trial folder)``; raises ``TrainingError`` when the gate itself could not run."""
    if not trials:
        return {}
    base_json = base.to_json()
    spec, verdicts = [], {}
    for index, values, folder in trials:
        item = {"index": index, "values": values, "directory": str(folder / GATE_FOLDER), "key": _key(base_json, values)}
        # A retried step keeps the verdicts its first attempt reached on the same values and config.
        if (kept := _read(Path(item["directory"]) / VERDICT_FILE)) is not None and kept.get("key") == item["key"]:
            verdicts[index] = kept
        else:
            spec.append(item)
    if not spec:
        return verdicts
    own = root / GATE_ROOT
    own.mkdir(parents=True, exist_ok=True)
    spec_path = own / "trials.json"
    atomic_write_text(spec_path, json.dumps(spec, indent=1, sort_keys=True))
    command = [sys.executable, "-m", GATE_MODULE, "--snapshot", snapshot_dir, "--config-json", base_json,
               "--trials", str(spec_path)]
    # The gate resolves each trial's values itself: no trial variable of the step's environment may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith(OPT_ENV_PREFIX)}
    log_path = own / GATE_LOG
    for item in spec:  # never read an earlier attempt's verdict on other values
        (Path(item["directory"]) / VERDICT_FILE).unlink(missing_ok=True)
    with open(log_path, "ab") as log:
        code = subprocess.run(warm_command(command), env=env, stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL).returncode
    for item in spec:
        if (verdict := _read(Path(item["directory"]) / VERDICT_FILE)) is None:
            raise TrainingError(f"the sanity gate on the trials ended (exit code {code}) without a verdict on trial "
                                f"{item['index']}: {log_tail(log_path, 2000)}")
        verdicts[item["index"]] = verdict
    return verdicts


def _key(base_json: str, values: dict[str, Any]) -> str:
    return hashlib.sha256((base_json + json.dumps(values, sort_keys=True)).encode()).hexdigest()


def _read(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def gate_jobs(jobs: Sequence[TrialJob], snapshot_dir: str, base: Config,
              root: Path) -> tuple[list[TrialJob], list[TrialOutcome]]:
    """The jobs to run, each carrying its verdict, and the recorded ``gate_failed`` outcomes of those the gate
    refused. A trial an earlier attempt of the step finished keeps its outcome (and verdict): not gated again."""
    kept = {job.plan.index: outcome for job in jobs if (outcome := finished_outcome(job)) is not None}
    todo = [job for job in jobs if job.plan.index not in kept]
    verdicts = gate_trials([(job.plan.index, job.plan.values, job.directory) for job in todo], snapshot_dir, base, root)
    ready, refused = [], []
    for job in jobs:
        index = job.plan.index
        if index in kept:
            ready.append(replace(job, gate=kept[index].gate))
            continue
        verdict = verdicts[index]
        job = replace(job, gate=gate_state(verdict))
        if job.gate != "failed":
            ready.append(job)
            continue
        outcome = job.outcome("gate_failed", seconds=float(verdict.get("seconds") or 0.0), error=_refusal(verdict))
        record(job, outcome)
        refused.append(outcome)
    return ready, refused


def gate_outcomes(outcomes: Sequence[TrialOutcome], snapshot_dir: str, base: Config, root: Path) -> list[TrialOutcome]:
    """Gate the succeeded trials of a search whose values were drawn elsewhere (Katib), once they are known: a
    refused one becomes ``gate_failed`` (its objective kept for the record, never chosen)."""
    todo = [o for o in outcomes if o.status == "succeeded" and o.gate is None]
    verdicts = gate_trials([(o.index, o.values, root / f"trial-{o.index:03d}") for o in todo], snapshot_dir, base, root)
    for outcome in todo:
        verdict = verdicts[outcome.index]
        outcome.gate = gate_state(verdict)
        if outcome.gate == "failed":
            outcome.status, outcome.error = "gate_failed", _refusal(verdict)
    return list(outcomes)


def _refusal(verdict: dict[str, Any]) -> str:
    checks = ", ".join(verdict.get("failed_checks") or [])
    return f"the sanity gate refused these values{f' ({checks})' if checks else ''}: {verdict.get('message')}"
