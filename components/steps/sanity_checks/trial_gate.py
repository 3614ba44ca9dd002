"""The sanity gate for each trial of a hyperparameter search: the gate's own checks on the trial's config.

The sanity step gates the configured values; a trial changes ``train.*`` (learning rate, weight decay, batch
size, clipping, warm-up: what overfit-one-batch, the short training, ``finite`` and the warmed-up structural
checks train with) or ``model.*`` / ``task.options.*`` (the model every check builds). So each trial's config, resolved as
the worker resolves it, goes through ``gate.run_sanity_checks`` whole, before the trial trains: a trial the
gate refuses is never trained, never chosen, and training never gets values that did not pass the gate.

The tune step runs this module as a command (no step imports another; the train step's launcher is run so
too), one process for all the trials, so torch is imported once:

    python -m ctpipe.components.steps.sanity_checks.trial_gate --snapshot DIR --config-json JSON --trials FILE

``FILE`` lists ``{"index", "values", "directory", "key"}``; each trial's verdict is written to
``<directory>/gate.json`` (``TrialVerdict``) beside the gate's report (``sanity.md``) and first batch.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import SanityCheckError, UserError
from ctpipe.components.run_config.trial import trial_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks

VERDICT_FILE = "gate.json"


@dataclass
class TrialVerdict:
    """The gate's verdict on one trial: passed (or skipped: ``sanity.enabled`` is off), the failed checks and
    the gate's message."""

    passed: bool
    skipped: bool = False
    failed_checks: list[str] | None = None
    message: str | None = None
    seconds: float = 0.0
    key: str | None = None  # the caller's key of the trial (its values and base config), echoed back

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def gate_trial(snapshot_dir: str, base: Config, values: Mapping[str, Any], directory: Path) -> TrialVerdict:
    """Run the sanity gate on ``base`` with a trial's ``values``; the report and first batch go to ``directory``.

    A refusal is a verdict, not an error: the checks that failed (``SanityCheckError``), or a config the gate
    cannot build a model from (a ``task.options`` value the task refuses) with the error's words."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    summary = directory / "sanity_summary.json"
    summary.unlink(missing_ok=True)  # never read a previous attempt's checks
    try:
        config = trial_config(base, values)
        result = run_sanity_checks(snapshot_dir, config, report_path=str(directory / "sanity.md"),
                                   first_batch_path=str(directory / "first_batch.json"), summary_path=str(summary),
                                   tracking_uri="", mlflow_run_id="")
        verdict = TrialVerdict(True, skipped=result.skipped, failed_checks=[])
    except SanityCheckError as e:
        verdict = TrialVerdict(False, failed_checks=_failed_checks(summary), message=str(e))
    except (UserError, ValueError, RuntimeError) as e:  # the model or its loss cannot be built or run with these values
        verdict = TrialVerdict(False, failed_checks=[],
                               message=f"the sanity gate cannot run this trial's config: {type(e).__name__}: {e}")
    verdict.seconds = round(time.perf_counter() - started, 3)
    return verdict


def _failed_checks(summary: Path) -> list[str]:
    """The names of the error-severity checks the gate's summary (written before it raises) records as failed."""
    try:
        checks = json.loads(summary.read_text()).get("checks") or {}
    except (OSError, ValueError):
        return []
    return [name for name, c in checks.items() if not c.get("passed") and c.get("severity", "error") == "error"]


def gate_trials(snapshot_dir: str, base: Config, trials: list[dict[str, Any]]) -> list[TrialVerdict]:
    """Gate each trial (``{"index", "values", "directory", "key"}``) and write its verdict, with its ``key``, to
    ``<directory>/gate.json``."""
    verdicts = []
    for trial in trials:
        directory = Path(trial["directory"])
        verdict = gate_trial(snapshot_dir, base, trial["values"], directory)
        verdict.key = trial.get("key")
        atomic_write_text(directory / VERDICT_FILE, json.dumps(verdict.to_dict(), indent=1, sort_keys=True))
        state = "skipped" if verdict.skipped else "passed" if verdict.passed else "FAILED"
        print(f"[tune] trial {trial['index']}: sanity gate {state} in {verdict.seconds:.1f} s"
              + (f": {verdict.message}" if verdict.message else ""), flush=True)
        verdicts.append(verdict)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The sanity gate on each trial of a hyperparameter search.")
    parser.add_argument("--snapshot", required=True)
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--trials", required=True, help="a JSON file: [{index, values, directory}, ...]")
    args = parser.parse_args(argv)
    gate_trials(args.snapshot, Config.from_json(args.config_json), json.loads(Path(args.trials).read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
