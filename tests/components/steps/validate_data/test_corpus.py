"""Show what the gate catches: each broken dataset is stopped at the right step with a message naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import DataValidationError, SanityCheckError
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.corpus import CASES, KEY, Case, write_clean


def fast_config(**validation) -> Config:
    return Config.from_dict({
        "data": {"key": KEY},
        "validation": validation,
        "sanity": {"sample_rows": 512, "overfit_steps": 150, "short_train_steps": 40},
        "model": {"hidden": 32, "depth": 1, "dropout": 0.0},
    })


def run_gate(data: Path, config: Config, out: Path) -> tuple[str | None, str]:
    """Run validate_data then run_sanity_checks like the pipeline; return (step that stopped, message)."""
    snapshot = out / "snapshot"
    try:
        validate_data(str(data), config, snapshot_dir=str(snapshot), data_docs_path=str(out / "docs.html"),
                      report_path=str(out / "validation.md"), tracking_uri="", mlflow_run_id="")
    except DataValidationError as err:
        return "validate_data", str(err)
    try:
        run_sanity_checks(str(snapshot), config, report_path=str(out / "sanity.md"),
                          first_batch_path=str(out / "first_batch.json"), tracking_uri="", mlflow_run_id="")
    except SanityCheckError as err:
        return "sanity_checks", str(err)
    return None, ""


@pytest.fixture(scope="module")
def reviewed_suite(tmp_path_factory) -> Path:
    """The suite profiled from clean data, as a user would review and commit it (validation.suite_path)."""
    tmp = tmp_path_factory.mktemp("reference")
    clean = write_clean(tmp / "data")
    validate_data(str(clean), fast_config(), snapshot_dir=str(tmp / "snap"), data_docs_path="", report_path="",
                  tracking_uri="", mlflow_run_id="")
    return tmp / "snap" / "suite.json"


def test_clean_data_passes_both_steps(tmp_path, reviewed_suite):
    data = write_clean(tmp_path / "data")
    step, message = run_gate(data, fast_config(suite_path=str(reviewed_suite)), tmp_path / "out")
    assert step is None, message


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_broken_data_is_stopped_at_the_right_step(case: Case, tmp_path, reviewed_suite):
    data = write_clean(tmp_path / "data")
    case.mutate(data)
    config = fast_config(suite_path=str(reviewed_suite)) if case.with_reference else fast_config()
    step, message = run_gate(data, config, tmp_path / "out")
    assert step == case.step, f"{case.name}: stopped at {step!r}: {message}"
    for needle in case.needles:
        assert needle in message, f"{case.name}: {needle!r} not in: {message}"
    assert "\n" not in message  # one paragraph
    if step == "validate_data":
        # Reports are written for the failed run, the snapshot is not: nothing downstream can start.
        assert (tmp_path / "out" / "validation.md").read_text().startswith("# Data validation: FAILED")
        assert "FAILED" in (tmp_path / "out" / "docs.html").read_text()
        assert not (tmp_path / "out" / "snapshot" / "train.parquet").exists()
    else:
        summary_md = (tmp_path / "out" / "sanity.md").read_text()
        assert summary_md.startswith("# Sanity checks: FAILED")


def test_a_few_out_of_range_values_are_a_warning_not_an_error(tmp_path, reviewed_suite):
    data = write_clean(tmp_path / "data")
    import pandas as pd

    part = sorted(data.glob("date=*/part-0.parquet"))[-1]
    frame = pd.read_parquet(part)
    frame.loc[frame.index[:2], "satisfaction"] = 9.5  # 2 of 900 rows: under the 1% error tolerance
    frame.to_parquet(part, index=False)
    result = validate_data(str(data), fast_config(suite_path=str(reviewed_suite)), snapshot_dir=str(tmp_path / "s"),
                           data_docs_path=str(tmp_path / "d.html"), report_path=str(tmp_path / "r.md"),
                           tracking_uri="", mlflow_run_id="")
    assert any("'satisfaction'" in w and "between" in w for w in result.warnings), result.warnings
    assert "## Warnings" in (tmp_path / "r.md").read_text()
    assert json.loads((tmp_path / "s" / "suite.json").read_text())["expectations"]
