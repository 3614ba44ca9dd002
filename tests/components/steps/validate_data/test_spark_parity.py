"""The Spark engine against the local engine: the same verdicts, failing checks, splits and statistics.

Both engines stream here (``validation.in_memory_rows=0``: the local engine's streamed path is the one the Spark
engine mirrors; below it the local engine reads every row). Small data keeps the shared session's jobs cheap;
``benchmarks/scale.py --engine spark`` runs the parity at millions of rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.snapshot import load_snapshot
from tests.components.steps.validate_data.test_streamed_validation import (  # noqa: F401  (a fixture)
    config,
    reviewed_suite,
    verdict,
)
from tests.fixtures.corpus import CASES, KEY, write_clean

PARITY_CASES = ("missing column", "stray text in a numeric column", "empty partition", "corrupt parquet",
                "duplicated rows across splits")


def _engine(engine: str, suite: str | None = None, **more):
    return config(suite, in_memory_rows=0, engine=engine, **more)


def rank_error(ordered: np.ndarray, quantiles: list[float]) -> float:
    """The largest distance from each percentile q to the rank interval of its value (ties span an interval)."""
    qs = np.linspace(0, 1, len(quantiles))
    low = np.searchsorted(ordered, quantiles, side="left") / len(ordered)
    high = np.searchsorted(ordered, quantiles, side="right") / len(ordered)
    return float(np.max(np.maximum(0.0, np.maximum(low - qs, qs - high))))


def _keys_by_split(snapshot: Path) -> dict[str, set]:
    return {s: set(pd.read_parquet(snapshot / f"{s}.parquet", columns=[KEY])[KEY]) for s in ("train", "val", "test")}


def test_clean_data_gets_the_same_verdict_splits_and_statistics(spark, tmp_path):
    data = write_clean(tmp_path / "data", days=4, rows_per_day=2_000)
    local = verdict(data, _engine("local"), tmp_path / "local")
    on_spark = verdict(data, _engine("spark", spark_partitions=3), tmp_path / "spark")
    assert local[0] is on_spark[0] is True
    assert on_spark[1] == local[1]
    for name in ("fingerprint", "rows", "errors", "warnings", "judged_on"):
        assert on_spark[2][name] == local[2][name], name
    assert [f["message"] for f in on_spark[2]["findings"]] == [f["message"] for f in local[2]["findings"]]
    snap_local, snap_spark = tmp_path / "local" / "snapshot", tmp_path / "spark" / "snapshot"
    assert (snap_spark / "train.parquet").is_dir()  # a folder of part files the ranks read by row group
    assert _keys_by_split(snap_spark) == _keys_by_split(snap_local)  # every key in the same split
    assert load_snapshot(snap_spark).rows("train") == load_snapshot(snap_local).rows("train")
    ref_local = json.loads((snap_local / "reference_stats.json").read_text())
    ref_spark = json.loads((snap_spark / "reference_stats.json").read_text())
    assert ref_spark["rows"] == ref_local["rows"] and ref_spark["categorical"] == ref_local["categorical"]
    values = pd.read_parquet(snap_local / "train.parquet")
    for col, stats in ref_local["numeric"].items():
        other = ref_spark["numeric"][col]
        assert other["mean"] == pytest.approx(stats["mean"], rel=1e-6) and other["std"] == pytest.approx(stats["std"], rel=1e-6)
        column = np.sort(pd.to_numeric(values[col], errors="coerce").dropna().to_numpy())
        for quantiles in (stats["quantiles"], other["quantiles"]):
            assert rank_error(column, quantiles) <= 0.01
        assert other["sample"] == stats["sample"]
    assert json.loads((snap_spark / "preprocessing.json").read_text()) == json.loads(
        (snap_local / "preprocessing.json").read_text())


@pytest.mark.parametrize("case", [c for c in CASES if c.name in PARITY_CASES], ids=lambda c: c.name)
def test_bad_data_gets_the_same_named_errors(spark, case, tmp_path, reviewed_suite):  # noqa: F811
    data = write_clean(tmp_path / "data")
    case.mutate(data)
    suite = str(reviewed_suite) if case.with_reference else None
    local = verdict(data, _engine("local", suite), tmp_path / "local")
    on_spark = verdict(data, _engine("spark", suite), tmp_path / "spark")
    assert local[0] is on_spark[0] is False
    assert on_spark[1] == local[1]
    assert all(any(needle in str(check) for check in on_spark[1]) for needle in case.needles), on_spark[1]


def test_a_value_beyond_float32_and_a_key_with_two_labels_are_named_alike(spark, tmp_path):
    data = write_clean(tmp_path / "data")
    part = next(data.glob("date=*/part-0.parquet"))
    frame = pd.read_parquet(part)
    frame.loc[3, "monthly_spend"] = 1e308
    frame.loc[5, KEY] = frame.loc[4, KEY]
    frame.loc[5, "label"] = "churn" if frame.loc[4, "label"] != "churn" else "stay"
    frame.to_parquet(part)
    local = verdict(data, _engine("local"), tmp_path / "local")
    on_spark = verdict(data, _engine("spark"), tmp_path / "spark")
    assert local[0] is on_spark[0] is False and on_spark[1] == local[1]
    assert any("different labels" in str(c) for c in on_spark[1]), on_spark[1]
