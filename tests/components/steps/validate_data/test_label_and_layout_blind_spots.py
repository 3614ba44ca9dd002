"""Issue 48's validation blind spots: a near copy of a continuous label, a leak of one class, labels corrupted in one
partition, images written in two orientations. Each is stopped by validate_data with a message naming its cause;
the healthy data beside it passes."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.demo_regression import LABEL, write_regression_demo
from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN, Schema
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.image_layout import check_image_layout
from ctpipe.components.steps.validate_data.label_shares import check_label_shares, partition_label_counts
from ctpipe.components.steps.validate_data.leakage_continuous import check_continuous_label_leakage
from ctpipe.components.steps.validate_data.leakage_per_class import (
    check_one_class_leakage,
    check_one_class_leakage_per_partition,
)
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.components.tasks.image_columns import Image, drift_columns

NUMERIC = ["tenure_months", "monthly_spend", "sessions_last_30d", "support_tickets", "satisfaction"]
CATEGORICAL = ["region", "device", "plan"]


def _validate(data: Path, out: Path, *settings: str) -> list[str]:
    """validate_data on ``data``: the DataValidationError's message, or the warnings of a pass."""
    values: dict = {"data": {"key": "customer_id"}}
    for setting in settings:
        section, field_name, value = setting.replace("=", ".", 1).split(".", 2)
        values.setdefault(section, {})[field_name] = value
    try:
        result = validate_data(str(data), Config.from_dict(values), snapshot_dir=str(out / "snap"), data_docs_path="",
                               report_path="", tracking_uri="", mlflow_run_id="")
    except DataValidationError as err:
        return ["ERROR " + str(err)]
    return result.warnings


def _edit_newest(data: Path, edit) -> None:
    newest = sorted(data.glob("date=*/part-0.parquet"))[-1]
    frame = pd.read_parquet(newest)
    edit(frame, np.random.default_rng(1)).to_parquet(newest, index=False)


def _edit_all(data: Path, edit) -> None:
    for part in sorted(data.glob("date=*/part-0.parquet")):
        edit(pd.read_parquet(part), np.random.default_rng(1)).to_parquet(part, index=False)


def _frame(rows: int, seed: int) -> pd.DataFrame:
    from ctpipe.components.lib.data.demo import generate_day

    frame = generate_day(0, rows, seed, False, 0)
    frame[SPLIT_COLUMN] = np.random.default_rng(seed).choice(["train", "val", "test"], rows, p=[0.8, 0.1, 0.1])
    return frame


# --- 1. a near copy of a continuous label -------------------------------------------------------------------


def test_a_near_copy_of_a_continuous_label_is_leakage_by_held_out_r2(tmp_path):
    data = tmp_path / "spend"
    write_regression_demo(data, days=3, rows_per_day=400)
    regression = ("task.name=tabular_regression", f"data.label={LABEL}")
    assert not any(w.startswith("ERROR") for w in _validate(data, tmp_path / "healthy", *regression))

    def copy(frame, rng):  # r = 0.9998: the label converted to another currency, with rounding noise
        frame["spend_forecast_eur"] = frame[LABEL] * 0.92 + rng.normal(0, 0.3, len(frame))
        return frame

    _edit_all(data, copy)
    (message,) = _validate(data, tmp_path / "copied", *regression)
    assert "label leakage: feature 'spend_forecast_eur' alone predicts the continuous label 'spend_next_month' with " \
           "held-out R² 0.99" in message, message


def test_continuous_leakage_leaves_a_strong_honest_feature_alone():
    frame = _frame(3000, 0)
    rng = np.random.default_rng(0)
    frame["y"] = frame["monthly_spend"] * 1.1 + rng.normal(0, 5.0, len(frame))  # r ~ 0.97 with monthly_spend
    schema = Schema(label="y", key=None, numeric=NUMERIC, categorical=CATEGORICAL, classes=[])
    findings = {f.column: f for f in check_continuous_label_leakage(frame, schema, 0.99)}
    assert findings["monthly_spend"].passed and 0.8 < float(findings["monthly_spend"].observed.split()[1]) < 0.99
    frame["copy"] = frame["y"] + rng.normal(0, 0.02 * frame["y"].std(), len(frame))
    with_copy = Schema(label="y", key=None, numeric=[*NUMERIC, "copy"], categorical=CATEGORICAL, classes=[])
    assert [f.column for f in check_continuous_label_leakage(frame, with_copy, 0.99) if not f.passed] == ["copy"]


# --- 2. a leak of one class ----------------------------------------------------------------------------------


def test_a_feature_that_reveals_one_class_is_leakage_of_that_class(tmp_path):
    data = tmp_path / "demo"
    write_demo_data(data, days=3, rows_per_day=600)

    def days_since_cancellation(frame, rng):  # only churned customers have cancelled: one class, AUC ~1
        frame["days_since_cancellation"] = np.where(frame["label"] == "churn", rng.normal(30, 5, len(frame)),
                                                    rng.normal(0, 5, len(frame)))
        return frame

    _edit_all(data, days_since_cancellation)
    (message,) = _validate(data, tmp_path / "out")
    assert "label leakage of one class: feature 'days_since_cancellation' alone separates class 'churn' of 'label' " \
           "from the other classes with held-out one-vs-rest AUC" in message, message


@pytest.mark.parametrize("seed", range(5))
def test_no_demo_feature_is_a_one_class_leak(seed):
    frame = _frame(3000, seed)
    schema = Schema(label="label", key=None, numeric=NUMERIC, categorical=CATEGORICAL, classes=[])
    (finding,) = check_one_class_leakage(frame, schema, 0.99)
    assert finding.passed, finding.message  # the strongest honest one: satisfaction for churn, AUC ~0.93


# --- 3. labels corrupted in one partition ----------------------------------------------------------------------


def test_a_class_relabelled_in_the_newest_partition_is_an_error_naming_it(tmp_path):
    data = tmp_path / "demo"
    write_demo_data(data, days=4, rows_per_day=600)

    def relabel(frame, _):
        frame.loc[frame["label"] == "churn", "label"] = "downgrade"
        return frame

    _edit_newest(data, relabel)
    (message,) = _validate(data, tmp_path / "out")
    assert "label class vanished in partition 'date=2026-01-04' (vs the other partitions): 'churn' 0 of 600 rows" \
           in message, message
    assert "beside it 'downgrade'" in message


def test_drifted_label_shares_warn_without_blocking(tmp_path):
    data = tmp_path / "demo"
    write_demo_data(data, days=3, rows_per_day=600, drift_from_day=2)  # churn 17% -> 57%, stay 49% -> 17%
    warnings = _validate(data, tmp_path / "out")
    assert not any(w.startswith("ERROR") for w in warnings), warnings
    assert any(w.startswith("label shares moved in partition 'date=2026-01-03'") for w in warnings), warnings


def test_label_shares_against_the_reference_suite_and_small_partitions():
    counts = pd.DataFrame({"a": [500, 480, 0], "b": [500, 520, 1000]}, index=["d1", "d2", "d3"])
    (found,) = [f for f in check_label_shares(counts, None, "label") if f.is_error]
    assert "partition 'd3'" in found.message and "'a' 0 of 1000 rows" in found.message
    # One partition alone: judged against the reference suite's shares only.
    (alone,) = check_label_shares(counts.loc[["d3"]], {"a": 0.5, "b": 0.5}, "label")
    assert not alone.passed and "vs the reference suite's label shares" in alone.message
    # A partition of 8 rows cannot show a vanished class: 0 of 8 at a 30% share has p = 0.06.
    tiny = pd.DataFrame({"a": [300, 0], "b": [700, 8]}, index=["d1", "d2"])
    assert check_label_shares(tiny, None, "label")[0].passed
    weighted = partition_label_counts(pd.Series(["a", "b", "a"]), pd.Series(["d1", "d1", "d2"]), np.array([10, 5, 7]))
    assert weighted.loc["d1"].tolist() == [10, 5] and weighted.loc["d2"].tolist() == [7, 0]


# --- 4. images in two orientations ----------------------------------------------------------------------------


def _digits() -> pd.DataFrame:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.reshape(-1, 64).astype(np.uint8)
    return pd.DataFrame({"image": [p.tobytes() for p in pixels], "label": digits.target})


def _transposed(values: pd.Series) -> pd.Series:
    return values.map(lambda b: np.frombuffer(b, np.uint8).reshape(8, 8).T.tobytes())


@pytest.mark.parametrize("share", [1.0, 0.5])
def test_a_partition_written_column_major_is_named(share):
    frame = _digits()
    part = pd.Series(np.arange(len(frame)) % 3).map({0: "d1", 1: "d2", 2: "d3"})
    image = Image("image", (8, 8), max_value=16)
    assert all(f.passed for f in check_image_layout(drift_columns(frame, [image]), part))
    rows = np.flatnonzero(part == "d3")[: int(share * (part == "d3").sum())]
    frame.loc[rows, "image"] = _transposed(frame.loc[rows, "image"])
    (found,) = check_image_layout(drift_columns(frame, [image]), part)
    assert not found.passed and found.severity == "error"
    assert found.message.startswith(f"image column 'image' in partition 'd3': about {share:.0%} of its 599 images look "
                                    "transposed (written column-major: rows stored as columns) against the other partitions")


def test_a_new_mix_of_classes_is_no_layout_change():
    frame = _digits()
    part = pd.Series(np.where(frame["label"] < 5, "d1", "d2"))  # 0-4 in one partition, 5-9 in the other
    assert all(f.passed for f in check_image_layout(drift_columns(frame, [Image("image", (8, 8), 16)]), part))


def test_mixed_orientation_is_stopped_by_validate_data_with_the_users_image_task(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[4] / "examples" / "digits"))
    import write_partitions

    from ctpipe.components.tasks.registry import _CACHE

    try:
        write_partitions.write_partitions(tmp_path / "digits", days=3)
        _edit_newest(tmp_path / "digits", lambda f, _: f.assign(image=_transposed(f["image"])))
        (message,) = _validate(tmp_path / "digits", tmp_path / "out", "data.key=id",
                               "task.entrypoint=digits_task:make_task")
    finally:
        for name in ("digits_task", "write_partitions"):
            sys.modules.pop(name, None)
        _CACHE.clear()
    assert "image column 'image' in partition 'date=2026-01-03': about 100% of its 599 images look transposed" \
           in message, message


def _sklearn_frame(name: str, copies: int = 1) -> tuple[pd.DataFrame, Schema]:
    import sklearn.datasets

    frame = getattr(sklearn.datasets, f"load_{name}")(as_frame=True).frame
    rng = np.random.default_rng(0)
    frame = pd.concat([frame] * copies, ignore_index=True)
    features = [c for c in frame.columns if c != "target"]
    frame[features] = frame[features] * rng.normal(1.0, 0.01, (len(frame), len(features)))  # no exact repeats
    frame["target"] = frame["target"].astype(str)
    frame[SPLIT_COLUMN] = rng.choice(["train", "val", "test"], len(frame), p=[0.6, 0.15, 0.25])
    frame["part"] = np.arange(len(frame)) * 3 // len(frame)
    return frame, Schema(label="target", key=None, numeric=features, categorical=[], classes=[])


def test_an_honest_feature_of_a_binary_label_is_left_to_the_whole_label_check():
    # Breast cancer's 'worst perimeter' separates the classes with AUC 0.99 in one partition: with two classes,
    # one against the rest is the whole label (its accuracy, not an AUC, is the leakage rule there).
    frame, schema = _sklearn_frame("breast_cancer")
    assert check_one_class_leakage_per_partition(frame, schema, 0.99, "part", already=set()) == []
    (finding,) = check_one_class_leakage(frame, schema, 0.99)
    assert finding.passed and finding.not_applicable and "not judged: 2 class(es)" in finding.message


def test_a_feature_that_also_tells_the_other_classes_apart_is_no_one_class_leak():
    # Iris' petal length separates setosa perfectly (AUC 1.0) and versicolor from virginica well: honest.
    frame, schema = _sklearn_frame("iris", copies=4)
    (finding,) = check_one_class_leakage(frame, schema, 0.99)
    assert finding.passed and "for class '0', 1.000)" in finding.message, finding.message  # AUC 1.0, not a leak
