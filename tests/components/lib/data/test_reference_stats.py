"""reference_stats.json: the format the drift watcher reads, including awkward columns."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.reference_stats import (
    compute_reference_stats,
    read_reference_stats,
    write_reference_stats,
)
from ctpipe.components.lib.data.snapshot import Schema


def test_format_and_awkward_columns(tmp_path):
    rng = np.random.default_rng(0)
    n = 12_000
    frame = pd.DataFrame({
        "x": rng.normal(5, 2, n),
        "empty": np.full(n, np.nan),
        "constant": np.ones(n),
        "with_inf": np.where(rng.random(n) < 0.1, np.inf, rng.random(n)),
        "city": np.where(rng.random(n) < 0.25, None, rng.choice(["a", "b"], n)),
        "label": rng.choice(["y", "n"], n),
    })
    schema = Schema(label="label", key=None, numeric=["x", "empty", "constant", "with_inf"], categorical=["city"],
                    classes=["n", "y"])
    stats = compute_reference_stats(frame, schema)
    write_reference_stats(tmp_path / "r.json", stats)  # strict JSON: no NaN/Infinity tokens
    loaded = read_reference_stats(tmp_path / "r.json")
    assert loaded == json.loads(json.dumps(stats))
    x = loaded["numeric"]["x"]
    assert loaded["rows"] == n and len(x["quantiles"]) == 101 and len(x["sample"]) == 5000
    assert abs(x["mean"] - 5) < 0.1 and abs(x["std"] - 2) < 0.1 and x["null_fraction"] == 0
    assert loaded["numeric"]["empty"] == {"mean": None, "std": None, "null_fraction": 1.0, "quantiles": [], "sample": []}
    assert loaded["numeric"]["constant"]["std"] == 0 and set(loaded["numeric"]["constant"]["quantiles"]) == {1.0}
    assert 0.08 < loaded["numeric"]["with_inf"]["null_fraction"] < 0.12  # non-finite values count as missing
    city = loaded["categorical"]["city"]
    assert 0.2 < city["null_fraction"] < 0.3 and set(city["frequencies"]) == {"a", "b"}
    # The sample is seeded: the same data gives the same reference.
    assert compute_reference_stats(frame, schema)["numeric"]["x"]["sample"] == stats["numeric"]["x"]["sample"]


def test_histogram_stats_of_batches_equal_those_of_the_whole_and_reject_other_bins():
    from ctpipe.components.lib.data.reference_stats import HistogramStats

    rng = np.random.default_rng(0)
    per_row = pd.DataFrame(rng.integers(0, 5, size=(50, 4)), columns=list("abcd"))
    per_row.iloc[3] = 0  # a row without a value is no document
    whole = HistogramStats().add(per_row).to_dict()
    batched = HistogramStats().add(per_row.iloc[:20]).add(per_row.iloc[20:]).to_dict()
    assert batched == whole
    assert whole["counts"] == per_row.sum().tolist() and whole["documents"] == 49 and whole["rows"] == 50
    assert np.allclose(whole["outer"], per_row.to_numpy().T @ per_row.to_numpy())
    try:
        HistogramStats().add(per_row).add(per_row.rename(columns={"d": "e"}))
    except ValueError as error:
        assert "bins changed" in str(error)
    else:
        raise AssertionError("other bins were accepted")


def test_the_sample_of_a_column_with_repeated_rows_has_the_columns_distribution():
    # Discrete features repeat whole rows. The sample's priority was a hash of the row's content only, so every
    # copy of a row had the same one: the bottom 5,000 of 20,000 rows were copies of the one row with the
    # lowest hash (every sampled 'rate' was 0.2), and a same-distribution window drifted (PSI ~6).
    from ctpipe.components.lib.data.snapshot import Schema

    rng = np.random.default_rng(0)
    levels = np.array([0.1, 0.2, 0.3, 0.7])
    frame = pd.DataFrame({"rate": rng.choice(levels, 20_000), "flag": rng.choice(["no", "yes"], 20_000)})
    schema = Schema(label=None, key=None, numeric=["rate"], categorical=["flag"], classes=[])
    sample = np.asarray(compute_reference_stats(frame, schema)["numeric"]["rate"]["sample"])
    assert len(sample) == 5000
    shares = np.array([(sample == v).mean() for v in levels])
    population = np.array([(frame["rate"] == v).mean() for v in levels])
    assert np.all(np.abs(shares - population) < 4 * np.sqrt(0.25 / 5000)), (shares, population)
    # Past the quantile sample's 100,000 values, the quantiles too.
    big = pd.DataFrame({"rate": rng.choice(levels, 300_000, p=[0.5, 0.3, 0.1, 0.1]), "flag": "no"})
    quantiles = compute_reference_stats(big, schema)["numeric"]["rate"]["quantiles"]
    assert quantiles[40] == 0.1 and quantiles[60] == 0.2 and quantiles[85] == 0.3 and quantiles[95] == 0.7
