"""`ctpipe suite` and the committed demo suite: profile, review, commit, and gate runs with it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.pipelines.cli.main import main
from tests.fixtures.paths import REPO_ROOT

DEMO_SUITE = REPO_ROOT / "components" / "steps" / "validate_data" / "suites" / "demo.json"


def validate(data: Path, out: Path, suite: Path):
    cfg = Config.from_dict({"data": {"key": "customer_id"}, "validation": {"suite_path": str(suite)}})
    return validate_data(str(data), cfg, snapshot_dir=str(out / "snap"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")


def test_committed_demo_suite_accepts_fresh_demo_data_and_catches_a_bad_score(tmp_path):
    write_demo_data(tmp_path / "data", days=3, rows_per_day=600, seed=1)
    result = validate(tmp_path / "data", tmp_path / "ok", DEMO_SUITE)
    assert "file" in result.suite_source and not [w for w in result.warnings if "between" in w]
    part = sorted((tmp_path / "data").glob("date=*/part-0.parquet"))[0]
    frame = pd.read_parquet(part)
    frame.loc[frame.index[:30], "satisfaction"] = 7.0  # outside the reviewed [1, 5] survey scale
    frame.to_parquet(part, index=False)
    with pytest.raises(DataValidationError, match="'satisfaction'"):
        validate(tmp_path / "data", tmp_path / "bad", DEMO_SUITE)


def test_profile_then_check_from_the_command_line(tmp_path, capsys):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=400)
    suite = tmp_path / "suites" / "mine.json"
    assert main(["suite", "profile", "--data", str(tmp_path / "data"), "--out", str(suite),
                 "--set", "data.key=customer_id"]) == 0
    profiled = json.loads(suite.read_text())
    assert profiled["meta"]["ctpipe"]["schema"]["key"] == "customer_id"
    assert main(["suite", "check", "--data", str(tmp_path / "data"), "--suite", str(suite), "--out",
                 str(tmp_path / "out"), "--set", "data.key=customer_id"]) == 0
    assert "data validation passed" in capsys.readouterr().out
    assert (tmp_path / "out" / "data_docs.html").is_file()


def test_check_on_bad_data_exits_2_with_one_paragraph(tmp_path, capsys):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=400)
    code = main(["suite", "check", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out"),
                 "--set", "data.label=target"])
    assert code == 2
    err = capsys.readouterr().err
    assert "'target'" in err and "Traceback" not in err
