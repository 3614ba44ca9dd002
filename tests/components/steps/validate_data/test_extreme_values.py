"""Extreme finite values (±1e308, subnormals) are flagged by validation, never crash a statistic or a JSON file.

One finite 1e308 in one train row crashed validation with "Out of range float values are not JSON
compliant" (its square overflowed the variance; reference_stats.json refused the inf), a bad-data problem
reported as an infrastructure failure that the watcher retried.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.encoding import encode_features, preprocessing_of
from ctpipe.components.lib.data.stream_stats import NumericStats, TableStats
from tests.components.steps.validate_data.test_corpus import fast_config, run_gate
from tests.fixtures.corpus import partitions, write_clean

EXTREMES = {0: 1e308, 1: -1e308, 2: 5e-324, 3: 1e308, 5: -5e-324}


def strict_json(path: Path) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"{path.name} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_extreme_values_are_flagged_by_validation_and_every_json_stays_valid(tmp_path):
    data = write_clean(tmp_path / "data")
    part = partitions(data)[-1]
    frame = pd.read_parquet(part)
    for i, value in EXTREMES.items():
        frame.loc[frame.index[i], "monthly_spend"] = value
    frame.loc[frame.index[4], "satisfaction"] = 5e-324
    frame.to_parquet(part, index=False)
    out = tmp_path / "out"

    step, message = run_gate(data, fast_config(), out)

    assert step is None, message  # a few extreme rows warn, as other out-of-range rows do
    train = pd.read_parquet(out / "snapshot" / "train.parquet")
    assert {1e308, -1e308} <= set(train["monthly_spend"])  # the statistics did see them
    report = (out / "validation.md").read_text()
    assert "monthly_spend" in report and "unexpected" in report.split("monthly_spend", 1)[1][:400]
    written = sorted(out.rglob("*.json"))
    assert {p.name for p in written} >= {"reference_stats.json", "suite.json", "preprocessing.json", "validation.json"}
    for path in written:
        strict_json(path)
    stats = strict_json(out / "snapshot" / "reference_stats.json")["numeric"]["monthly_spend"]
    assert 0 < stats["mean"] < 1e3 and 0 < stats["std"] < 1e3 and stats["null_fraction"] > 0  # read as missing
    suite = strict_json(out / "snapshot" / "suite.json")
    ranges = [e["kwargs"] for e in suite["expectations"]
              if e["type"] == "expect_column_values_to_be_between" and e["kwargs"].get("column") == "monthly_spend"]
    assert ranges and all(r["max_value"] < 1e6 for r in ranges)  # the profiled range leaves 1e308 out


@pytest.mark.parametrize("values", [[1e308, 1e308, -1e308, 1.0], [1.7976931348623157e308, -1.7976931348623157e308, 2.0],
                                    [5e-324, -5e-324, 0.0], [3e38, -3e38, 1e39]])
def test_statistics_and_the_encoding_read_values_beyond_float32_as_missing(values):
    values = np.array(values)
    stats = NumericStats().add(pd.Series(values), np.arange(len(values), dtype=np.uint64))
    usable = values[np.abs(values) <= np.finfo(np.float32).max]
    assert stats.count == len(usable) and stats.null_fraction == pytest.approx(1 - len(usable) / len(values))
    assert stats.mean == pytest.approx(usable.mean(), abs=1e-323) and math.isfinite(stats.std)
    assert np.isfinite(stats.quantiles(np.linspace(0, 1, 11))).all()
    prep = preprocessing_of(TableStats(numeric={"x": stats}), ["a"])
    x_num, _ = encode_features(pd.DataFrame({"x": values}), prep)
    assert np.isfinite(x_num).all()
    assert (x_num[np.abs(values) > np.finfo(np.float32).max] == 0).all()  # missing: the train mean
