"""End to end: `ctpipe run --set tune.trials=8` on the demo data, with small budgets. The tune step runs eight trials
(the configured values first) as training jobs judged on validation, training takes the chosen values, and the
candidate goes through selection, evaluation and the blessing as any other; summary.json and the registered
version's lineage record the search."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMALL = ["train.max_steps=60", "train.eval_every=20", "train.checkpoint_every=20", "train.warmup_steps=5",
         "evaluate.bootstrap_samples=300", "tune.trials=8", "tune.trial_steps=20", "tune.parallel_trials=2"]


def test_a_run_with_eight_trials_trains_and_judges_the_chosen_configuration(tmp_path):
    env = {**os.environ, "CTPIPE_HOME": str(tmp_path), "MLFLOW_DISABLE_TELEMETRY": "true"}
    result = subprocess.run([sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--quiet",
                             *[x for s in SMALL for x in ("--set", s)]], capture_output=True, text=True, env=env, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    assert list(summary["steps"]) == ["prepare_run", "validate_data", "sanity_checks", "tune", "train",
                                      "select_checkpoint", "evaluate", "register"]
    assert all(v == "passed" for v in summary["steps"].values()), summary["steps"]
    tune = summary["tune"]
    # A trial whose loss diverged (the largest learning rates), or whose values the sanity gate refused (a rate too
    # small to memorise a batch in the gate's steps), would be recorded, never chosen.
    assert len(tune["trials"]) == 8 and {t["status"] for t in tune["trials"]} <= {"succeeded", "diverged", "gate_failed"}
    assert all((t["gate"] == "failed") == (t["status"] == "gate_failed") for t in tune["trials"])
    assert tune["trials"][0]["baseline"] and tune["trials"][0]["values"] == {"train.lr": 0.003, "train.weight_decay": 0.01}
    chosen = tune["chosen"]
    assert chosen["gate"] == "passed"  # tuning never bypasses the gate: the train step would refuse it otherwise
    assert chosen["objective"] >= tune["baseline_objective"]  # never worse on validation than the config as given
    assert chosen["objective"] == max(t["objective"] for t in tune["trials"] if t["status"] == "succeeded")
    # The report lists the eight trials, with an axis plot per hyperparameter.
    page = Path(tune["report"]).read_text()
    assert len(re.findall(r"<tr(?: class='chosen')?><td>\d+</td>", page)) == 8
    assert [m for m in re.findall(r"alt='val_accuracy against ([\w.]+)'", page)] == ["train.lr", "train.weight_decay"]
    # The candidate trained with the chosen values, was selected, evaluated and blessed as any other.
    assert summary["blessed"] is not None and summary["model_version"]
    lineage = next(p for p in (tmp_path / "mlartifacts").rglob("lineage.json"))
    recorded = json.loads(lineage.read_text())["config"]
    assert recorded["train"]["lr"] == chosen["values"]["train.lr"]
    assert recorded["tune"]["chosen"]["chosen"] == chosen
    assert len(recorded["tune"]["chosen"]["search"]) == 8
