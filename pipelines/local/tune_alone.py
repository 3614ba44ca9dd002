"""The tune step on its own, outside the pipeline: snapshot a data root, search, report, write the chosen config.

``ctpipe tune --data URI --out DIR`` calls ``tune_standalone``: the snapshot goes to DIR/snapshot (the pipeline's
split logic, as ``ctpipe train``), the trials to DIR/trials, the report to DIR/tune_report.html, the search to
DIR/tune_summary.json and the config with the chosen values to DIR/tuned_config.json (a config file:
``ctpipe run --config DIR/tuned_config.json`` trains it, and the pipeline judges it as any candidate). Run again
on the same DIR and the trials that finished are kept.

A runner, as ``ctpipe run`` is: it calls the tune step's plain function on this machine without KFP, with the
trials forked from a warm-start server as in a local run, so the step folder stays the step's alone and the CLI
imports no step.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.warm_start import running_server
from ctpipe.components.steps.tune.tune import tune_hyperparameters
from ctpipe.pipelines.local.train_alone import build_snapshot, mlflow_run_for_output

SUMMARY_FILE = "tune_summary.json"
REPORT_FILE = "tune_report.html"
CONFIG_FILE = "tuned_config.json"
# What a trial's two processes (its launcher, its ranks) and the trials' sanity gate import: forked warm, a trial
# starts in well under a second.
TRIAL_MODULES = ("torch", "mlflow", "ctpipe.components.tasks.tabular", "ctpipe.components.engine.tracker",
                 "ctpipe.components.steps.train.launch", "ctpipe.components.steps.train.worker",
                 "ctpipe.components.steps.sanity_checks.trial_gate")


def tune_standalone(data_uri: str, out_dir: str | Path, config: Config, *, tracking_uri: str | None = None) -> dict[str, Any]:
    """Snapshot + the search of ``config.tune`` under ``out_dir``; its summary (also DIR/tune_summary.json)."""
    if config.tune.trials == 0:
        raise UserError("ctpipe tune needs tune.trials > 0, e.g. --set tune.trials=8 (and a search space: "
                        "tune.space, default the learning rate and weight decay)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    snapshot = build_snapshot(data_uri, config, out / "snapshot")
    run_id = mlflow_run_for_output(tracking_uri, config, out, data_uri) if tracking_uri else None
    job = "ctpipe-tune-" + hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:8]
    with running_server(preload=TRIAL_MODULES):
        result = tune_hyperparameters(str(snapshot.root), str(out / "trials"), config, tracking_uri=tracking_uri,
                                      mlflow_run_id=run_id, job_name=job, report_path=str(out / REPORT_FILE))
    atomic_write_text(out / CONFIG_FILE, json.dumps(result.config.to_dict(), indent=1, sort_keys=True))
    summary = {**result.summary, "tuned_config": str(out / CONFIG_FILE), "data_uri": data_uri,
               "snapshot_dir": str(snapshot.root), "mlflow_run_id": run_id}
    atomic_write_text(out / SUMMARY_FILE, json.dumps(summary, indent=1, default=str))
    return summary
