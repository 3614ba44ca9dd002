"""The label's kind decides in validation's structure checks: a continuous label given to classification stops
there (naming task.name=tabular_regression), a regression label is profiled as a number, not as classes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_day_partition
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.label_kind import check_label_kind, looks_continuous
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.diabetes import write_diabetes


def validate(data: Path, out: Path, **task: str):
    cfg = Config.from_dict({"data": {"label": "target", "key": None}, "task": task})
    return validate_data(str(data), cfg, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")


@pytest.fixture(scope="module")
def diabetes(tmp_path_factory) -> Path:
    return write_diabetes(tmp_path_factory.mktemp("diabetes") / "data")


def test_the_diabetes_score_given_to_classification_stops_before_the_suite_naming_regression(diabetes, tmp_path):
    with pytest.raises(DataValidationError) as err:
        validate(diabetes, tmp_path)
    message = str(err.value)
    assert "label column 'target' looks continuous" in message and "214 distinct values" in message
    assert "--set task.name=tabular_regression" in message
    assert "values to be in set" not in message  # stopped in the structure checks, before GX profiling
    assert not (tmp_path / "snapshot" / "suite.json").exists()


def test_the_diabetes_score_given_to_regression_is_validated_as_a_number(diabetes, tmp_path):
    validate(diabetes, tmp_path, name="tabular_regression")
    snapshot = load_snapshot(tmp_path / "snapshot")
    assert snapshot.schema.label == "target" and snapshot.schema.classes == []
    suite = json.loads((tmp_path / "snapshot" / "suite.json").read_text())
    on_label = {e["type"] for e in suite["expectations"] if e["kwargs"].get("column") == "target"}
    assert {"expect_column_values_to_not_be_null", "expect_column_values_to_be_between",
            "expect_column_quantile_values_to_be_between"} <= on_label
    assert "expect_column_values_to_be_in_set" not in on_label
    assert snapshot.state["target"]["mean"] == pytest.approx(snapshot.frame("train")["target"].mean())


def test_a_regression_label_far_out_of_its_range_fails_the_suite(diabetes, tmp_path):
    validate(diabetes, tmp_path / "first", name="tabular_regression")
    broken = tmp_path / "broken"
    write_diabetes(broken)
    for part in sorted(broken.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        frame["target"] = frame["target"] * 1000.0  # a unit change at the source
        frame.to_parquet(part, index=False)
    suite = tmp_path / "first" / "snapshot" / "suite.json"
    cfg = Config.from_dict({"data": {"label": "target", "key": None}, "task": {"name": "tabular_regression"},
                            "validation": {"suite_path": str(suite)}})
    with pytest.raises(DataValidationError, match="target"):
        validate_data(str(broken), cfg, snapshot_dir=str(tmp_path / "b" / "snapshot"),
                      data_docs_path=str(tmp_path / "b" / "docs.html"), report_path=str(tmp_path / "b" / "report.md"),
                      tracking_uri="", mlflow_run_id="")


def test_a_text_label_given_to_regression_is_an_error_naming_classification(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=200), "target": rng.choice(["cat", "dog"], 200)})
    write_day_partition(tmp_path / "data", 0, frame)
    with pytest.raises(DataValidationError, match="must be a number on every row.*task.name=tabular_classification"):
        validate(tmp_path / "data", tmp_path, name="tabular_regression")


def test_kinds_of_labels():
    rng = np.random.default_rng(0)
    assert looks_continuous(pd.Series(rng.normal(size=500)))
    assert looks_continuous(pd.Series(rng.integers(0, 1000, 500)))  # nearly unique integers: a quantity
    assert not looks_continuous(pd.Series(rng.integers(0, 10, 500)))  # digits
    assert not looks_continuous(pd.Series(rng.integers(0, 10, 500).astype(float)))  # digits read as float
    assert not looks_continuous(pd.Series(rng.choice(["a", "b"], 500)))
    assert not looks_continuous(pd.Series(rng.integers(0, 40, 5000)))  # 40 integer classes, many rows each
    stars = pd.Series(rng.integers(1, 6, 300), name="stars")
    [warning] = check_label_kind(stars, "continuous", "tabular_regression")
    assert warning.severity == "warning" and "task.name=tabular_classification" in warning.message
    assert check_label_kind(pd.Series(rng.normal(size=300), name="y"), "continuous", "tabular_regression") == []


def test_the_regression_demo_data_validates_with_its_own_settings(tmp_path):
    from ctpipe.components.run_config import load_config
    from ctpipe.components.tasks import load_task

    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    task.demo.write_data(str(tmp_path / "data"), days=2, rows_per_day=300)
    cfg = load_config(None, ["task.name=tabular_regression"], demo=True)
    result = validate_data(str(tmp_path / "data"), cfg, snapshot_dir=str(tmp_path / "snapshot"),
                           data_docs_path=str(tmp_path / "docs.html"), report_path=str(tmp_path / "report.md"),
                           tracking_uri="", mlflow_run_id="")
    assert sum(result.rows.values()) == 600
    assert load_snapshot(tmp_path / "snapshot").schema.label == "spend_next_month"


def test_a_streamed_continuous_label_keeps_the_sample_within_its_budget(tmp_path):
    # Stratified by label class, every distinct value of a real-valued label got its floor of rows: the
    # "sample" of 6000 rows was every row. By partition only, each partition keeps its budget of rows.
    from ctpipe.components.lib.data.scan import MIN_PER_PARTITION
    from ctpipe.components.tasks import load_task

    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    task.demo.write_data(str(tmp_path / "data"), days=2, rows_per_day=3000)
    cfg = Config.from_dict({"data": {"label": "spend_next_month", "key": "customer_id"},
                            "task": {"name": "tabular_regression"},
                            "validation": {"in_memory_rows": 0, "sample_rows": 1000}})
    result = validate_data(str(tmp_path / "data"), cfg, snapshot_dir=str(tmp_path / "snapshot"),
                           data_docs_path=str(tmp_path / "docs.html"), report_path=str(tmp_path / "report.md"),
                           tracking_uri="", mlflow_run_id="")
    assert sum(result.rows.values()) == 6000
    judged_on = (tmp_path / "report.md").read_text().split("- judged on: ")[1].splitlines()[0]
    sampled = int(judged_on.split("a stratified sample of ")[1].split(" ")[0])
    assert sampled == 2 * MIN_PER_PARTITION < 6000, judged_on
