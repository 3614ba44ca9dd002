"""The validate step on its own, outside the pipeline: what ``ctpipe suite profile/champion/check`` runs.

    suite = profile_suite(data_uri, config)              # the suite validation would profile from this data
    suite, version = champion_suite_of(tracking_uri, config)
    result = check_data(data_uri, config, out_dir)       # the step alone: snapshot, Data Docs, report

A runner, as ``ctpipe run`` and ``ctpipe train`` (train_alone.py) are: it runs the validate step's plain
functions on this machine without KFP, so the step folder stays the step's alone and the CLI imports no step.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import UserError
from ctpipe.components.steps.validate_data.suite import champion_suite
from ctpipe.components.steps.validate_data.validate import ValidationResult, validate_data


def profile_suite(data_uri: str, config: Config) -> dict[str, Any]:
    """A suite profiled from the train split of ``data_uri`` (the data must pass the other checks)."""
    profiling = dataclasses.replace(
        config, validation=dataclasses.replace(config.validation, suite_path=None, use_champion_suite=False))
    with tempfile.TemporaryDirectory() as tmp:
        validate_data(data_uri, profiling, snapshot_dir=f"{tmp}/snapshot", data_docs_path="", report_path="",
                      tracking_uri="", mlflow_run_id="")
        return json.loads(Path(f"{tmp}/snapshot/suite.json").read_text())


def champion_suite_of(tracking_uri: str, config: Config) -> tuple[dict[str, Any], str]:
    """The suite stored with the champion model and its version; UserError when there is none."""
    found = champion_suite(tracking_uri, config)
    if found is None:
        raise UserError(
            f"model '{config.registry.model_name}' has no '{config.registry.champion_alias}' version with a stored "
            "suite (reference/suite.json). Run the pipeline until a model is blessed, or use 'ctpipe suite profile'."
        )
    suite, _, version, _ = found
    return suite, version


def check_data(data_uri: str, config: Config, out_dir: str | Path, *, suite_path: str | None = None) -> ValidationResult:
    """The validate step alone into ``out_dir``: a fresh ``snapshot/``, ``data_docs.html`` and ``validation.md``,
    judged by ``suite_path`` when given (else as configured: ``validation.suite_path``, the champion's, profiled)."""
    if suite_path:
        config = dataclasses.replace(config, validation=dataclasses.replace(config.validation, suite_path=suite_path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    snapshot = out / "snapshot"
    if snapshot.exists():
        shutil.rmtree(snapshot)
    return validate_data(data_uri, config, snapshot_dir=str(snapshot), data_docs_path=str(out / "data_docs.html"),
                         report_path=str(out / "validation.md"), tracking_uri="", mlflow_run_id="")
