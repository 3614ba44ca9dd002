"""End to end: scikit-learn's diabetes data through the real local pipeline as a regression, judged against
the mean predictor; the same data given to classification stops at validation with exit 2 and the hint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.steps.validate_data.label_kind import looks_continuous
from tests.fixtures.diabetes import write_diabetes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SMALL = ["train.max_steps=60", "train.eval_every=20", "train.checkpoint_every=20", "train.warmup_steps=5",
         "evaluate.bootstrap_samples=300"]


def ctpipe(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTPIPE_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "-m", "ctpipe.pipelines.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def sets(*settings: str) -> list[str]:
    return [x for item in settings for x in ("--set", item)]


@pytest.fixture(scope="module")
def diabetes(tmp_path_factory) -> Path:
    return write_diabetes(tmp_path_factory.mktemp("diabetes") / "data")


def test_diabetes_runs_end_to_end_as_a_regression_judged_against_the_mean_predictor(diabetes, tmp_path):
    result = ctpipe("run", "--data", str(diabetes), "--task", "tabular_regression",
                    *sets("data.label=target", "data.key=null", *SMALL), home=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    assert all(v == "passed" for v in summary["steps"].values()), summary["steps"]
    assert set(summary["metrics"]["candidate"]) == {"rmse", "mae", "r2"}
    assert summary["selected_checkpoint_metric"]["name"] == "val_loss"
    # The value rule on RMSE compares with the mean predictor: the train split's mean for every test row.
    # (The first model is also compared with the ridge baseline: a second "rmse ..." reason, about that model.)
    [rmse_reason] = [r for r in summary["blessing_reasons"] if r.startswith("rmse ") and "vs the mean predictor's" in r]
    assert any(r.startswith("rmse ") and "vs ridge regression's" in r for r in summary["blessing_reasons"])
    blessing = next(Path(tmp_path / "pipeline_root").glob("*/evaluate/blessing"))
    record = json.loads(blessing.read_text())
    from ctpipe.components.lib.data.snapshot import load_snapshot

    snap = load_snapshot(next(Path(tmp_path / "pipeline_root").glob("*/validate-data/snapshot")))
    test_y = snap.frame("test")["target"].to_numpy()
    mean_rmse = float(np.sqrt(np.mean((test_y - snap.frame("train")["target"].mean()) ** 2)))
    assert record["baseline_metrics"]["rmse"] == pytest.approx(mean_rmse)
    assert record["class_names"] == [] and record["confusion_matrix"] == []
    card = next(Path(tmp_path / "pipeline_root").glob("*/evaluate/model_card")).read_text()
    assert "the baseline is the mean predictor" in card and "a real number (no classes)" in card
    assert "prior predictor" not in card


def test_the_same_data_given_to_classification_stops_at_validation_with_the_hint(diabetes, tmp_path):
    result = ctpipe("run", "--data", str(diabetes), *sets("data.label=target", "data.key=null"), home=tmp_path)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "error in step validate_data" in result.stderr + result.stdout
    assert "looks continuous" in result.stderr + result.stdout
    assert "--set task.name=tabular_regression" in result.stderr + result.stdout
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    assert summary["steps"]["sanity_checks"] == "skipped" and summary["steps"]["train"] == "skipped"


def test_demo_data_of_the_regression_task(tmp_path):
    result = ctpipe("demo-data", "--task", "tabular_regression", "--out", str(tmp_path / "spend"), "--days", "2",
                    home=tmp_path)
    assert result.returncode == 0, result.stderr
    frame = pd.read_parquet(tmp_path / "spend")
    assert "spend_next_month" in frame.columns and "label" not in frame.columns
    assert looks_continuous(frame["spend_next_month"]) and (frame["spend_next_month"] >= 0).all()
    # It follows the features (spend, plan, satisfaction): most of its variance is explained by them.
    assert np.corrcoef(frame["spend_next_month"], frame["monthly_spend"])[0, 1] > 0.8
