"""data.window_days / data.max_train_rows: training uses the recent past; val/test keep every partition."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.snapshot import load_snapshot, training_split_record
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.data.window import TrainWindow, window_mask
from ctpipe.components.lib.errors import ConfigError, DataValidationError
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.registry import tabular_preprocessing


def test_window_days_keeps_the_train_rows_of_the_newest_days():
    parts = np.array(["date=2026-01-01", "date=2026-01-02", "date=2026-01-03", "date=2026-01-03", "date=2026-01-02"])
    train = np.array([True, True, True, False, True])
    keep = window_mask(parts, train, TrainWindow(window_days=2))
    assert keep.tolist() == [False, True, True, False, True]


def test_max_train_rows_keeps_the_newest_rows():
    parts = np.array(["date=2026-01-01"] * 3 + ["date=2026-01-02"] * 3)
    train = np.array([True, True, True, True, False, True])
    keep = window_mask(parts, train, TrainWindow(max_train_rows=3))
    # The two train rows of the newest day, then the last train row of the day before.
    assert keep.tolist() == [False, False, True, True, False, True]


def test_window_days_without_dates_is_a_clear_error():
    with pytest.raises(DataValidationError, match="needs a date in every partition path"):
        window_mask(np.array(["part-a", "part-b"]), np.array([True, True]), TrainWindow(window_days=3))


def test_window_settings_are_validated_config_keys():
    assert Config.from_dict({}).data.window_days is None and Config.from_dict({}).data.max_train_rows is None
    with pytest.raises(ConfigError, match="data.window_days"):
        Config.from_dict({"data": {"window_days": 0}})
    with pytest.raises(ConfigError, match="data.max_train_rows"):
        Config.from_dict({"data": {"max_train_rows": -5}})


def test_validation_judges_every_partition_and_the_snapshot_trains_on_the_window(tmp_path):
    write_demo_data(tmp_path / "data", days=5, rows_per_day=400)
    cfg = Config.from_dict({"data": {"key": "customer_id", "window_days": 2}})
    result = validate_data(str(tmp_path / "data"), cfg, snapshot_dir=str(tmp_path / "snap"), data_docs_path="",
                           report_path="", tracking_uri="", mlflow_run_id="")
    snap = load_snapshot(tmp_path / "snap")
    train, test = snap.frame("train"), snap.frame("test")
    assert sorted(train["__partition"].unique()) == ["date=2026-01-04", "date=2026-01-05"]
    assert test["__partition"].nunique() == 5  # the gates still see every partition
    assert result.rows["train"] > len(train)  # validation counted every train row
    meta = json.loads((tmp_path / "snap" / "fingerprint.json").read_text())["train_window"]
    assert meta["excluded_train_rows"] == result.rows["train"] - len(train)
    record = training_split_record(snap, SplitSettings.from_config(cfg.data))
    assert record["window_days"] == 2 and record["max_train_rows"] is None
    assert record["partitions"] == ["date=2026-01-04", "date=2026-01-05"] and record["train_rows"] == len(train)
    # Preprocessing is fitted on the rows the model trains on.
    assert tabular_preprocessing(snap).numeric["tenure_months"]["mean"] == pytest.approx(train["tenure_months"].mean())


def test_window_days_with_undated_partitions_fails_validation_with_the_fix(tmp_path):
    for name in ("part-a", "part-b"):
        (tmp_path / "data" / name).mkdir(parents=True)
    from ctpipe.components.lib.data.demo import generate_day

    for i, name in enumerate(("part-a", "part-b")):
        generate_day(i, 300, 0, False, key_offset=i * 300).to_parquet(tmp_path / "data" / name / "p.parquet")
    cfg = Config.from_dict({"data": {"key": "customer_id", "window_days": 2}})
    with pytest.raises(DataValidationError, match="window_days=2 needs a date"):
        validate_data(str(tmp_path / "data"), cfg, snapshot_dir=str(tmp_path / "snap"), data_docs_path="",
                      report_path="", tracking_uri="", mlflow_run_id="")
    assert not pd.io.common.file_exists(str(tmp_path / "snap" / "train.parquet"))
