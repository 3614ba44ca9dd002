"""Column sketches: exact where they say so, KLL quantiles within the rank error that k = 2048 promises."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.reference_stats import QUANTILES, compute_reference_stats
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.sketches.column_sketch import KLL_K, CategoricalSketch, NumericSketch


def _sketch(values, start=0) -> NumericSketch:
    values = pd.Series(values)
    return NumericSketch().add(values, np.arange(start, start + len(values), dtype=np.uint64) * np.uint64(2654435761))


def test_moments_merge_to_the_one_pass_figures_and_bad_values_count_as_missing():
    rng = np.random.default_rng(1)
    values = np.concatenate([rng.normal(1e6, 3.0, 30_000), [np.inf, np.nan, 1e308, -np.inf]])
    parts = [_sketch(values[i::4], i * 10_000) for i in range(4)]
    merged = parts[0].merge(parts[1]).merge(parts[2]).merge(parts[3])
    usable = values[np.isfinite(values) & (np.abs(values) < 1e38)]
    assert merged.rows == len(values) and merged.count == len(usable)
    # A large mean and a small spread: sum and sum of squares would cancel; the pairwise update does not.
    assert merged.mean == pytest.approx(usable.mean(), rel=1e-12)
    assert merged.std == pytest.approx(usable.std(), rel=1e-9)
    assert (merged.min, merged.max) == (usable.min(), usable.max())


def test_quantiles_are_exact_while_the_sketch_holds_every_value():
    values = np.random.default_rng(2).exponential(size=KLL_K - 48)
    sketch = _sketch(values)
    assert not sketch.kll.is_estimation_mode()
    assert sketch.quantiles(QUANTILES) == [float(q) for q in np.quantile(values, QUANTILES)]


def test_quantiles_past_the_sketch_stay_within_its_rank_error_also_in_the_tails():
    # k = 200 put the p99 of a normal at 2.41 or 2.23 (true 2.326: 0.3 % of rank off); k = 2048's bound is 0.14 %.
    rng = np.random.default_rng(3)
    values = rng.normal(size=400_000)
    parts = [_sketch(values[i * 50_000:(i + 1) * 50_000], i * 50_000) for i in range(8)]
    merged = parts[0]
    for part in parts[1:]:
        merged = merged.merge(part)
    ordered = np.sort(values)
    qs = np.array([0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999])
    ranks = np.searchsorted(ordered, merged.quantiles(qs), side="right") / len(values)
    assert np.max(np.abs(ranks - qs)) < 0.0025, ranks - qs
    assert merged.quantiles(np.array([0.0, 1.0])) == [ordered[0], ordered[-1]]


def test_a_sketch_round_trips_through_its_json_form():
    rng = np.random.default_rng(4)
    sketch = _sketch(rng.normal(size=9_000))
    again = NumericSketch.from_dict(sketch.to_dict())
    assert again.to_dict() == sketch.to_dict()
    assert again.quantiles(QUANTILES) == sketch.quantiles(QUANTILES)
    empty = NumericSketch.from_dict(NumericSketch().to_dict())
    assert empty.count == 0 and empty.quantiles(QUANTILES) == []
    cats = CategoricalSketch().add(pd.Series(["a", "b", None, "a", 17.0]))
    back = CategoricalSketch.from_dict(cats.to_dict())
    assert back.frequencies() == {"a": 2, "17": 1, "b": 1} and back.nulls == 1 and back.distinct() == 3


def test_categories_past_the_exact_count_fall_back_to_the_frequent_items_and_hll():
    from ctpipe.components.lib.sketches import column_sketch

    rng = np.random.default_rng(5)
    common = rng.choice(["x", "y"], 30_000)
    rare = np.array([f"id{i}" for i in range(column_sketch.MAX_COUNTED + 2_000)])
    sketch = CategoricalSketch().add(pd.Series(common)).merge(CategoricalSketch().add(pd.Series(rare)))
    assert sketch.counts is None
    assert abs(sketch.distinct() - (len(rare) + 2)) / (len(rare) + 2) < 0.05
    top = list(sketch.frequencies().items())[:2]
    assert {k for k, _ in top} == {"x", "y"} and all(abs(v - 15_000) < 400 for _, v in top)


def test_reference_statistics_of_a_sketch_equal_those_streamed_for_moments_counts_and_sample():
    from ctpipe.components.lib.data.reference_stats import reference_stats_of
    from ctpipe.components.lib.data.stream_stats import row_priority
    from ctpipe.components.lib.sketches.table_sketch import TableSketch

    rng = np.random.default_rng(6)
    frame = pd.DataFrame({"x": rng.normal(5, 2, 1500), "c": rng.choice(["a", "b", None], 1500)})
    schema = Schema(label=None, key=None, numeric=["x"], categorical=["c"], classes=[])
    streamed = compute_reference_stats(frame, schema)
    sketched = reference_stats_of(TableSketch.for_columns(["x"], ["c"]).add(frame, row_priority(frame)))
    assert sketched == streamed  # below k values and 5,000 sample rows every figure is the same
