"""Streaming statistics equal exact pandas results, and merging partial results equals one pass."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.stream_stats import (
    BottomK,
    DistinctCount,
    TableStats,
    row_priority,
    value_hashes,
)

NUMERIC, CATEGORICAL = ["x", "gappy", "with_inf"], ["city"]


def frame(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "x": rng.normal(5, 2, n),
        "gappy": np.where(rng.random(n) < 0.3, np.nan, rng.poisson(3, n)),
        "with_inf": np.where(rng.random(n) < 0.1, np.inf, rng.random(n)),
        "city": np.where(rng.random(n) < 0.2, None, rng.choice(["a", "b", "c"], n)),
    })


def stats_of(*batches: pd.DataFrame) -> TableStats:
    acc = TableStats.for_columns(NUMERIC, CATEGORICAL)
    for b in batches:
        acc.add(b)
    return acc


def test_streaming_statistics_equal_exact_pandas_results():
    data = frame(5000)
    acc = stats_of(*(data.iloc[i : i + 700] for i in range(0, len(data), 700)))
    assert np.array_equal(acc.numeric["x"].sample.finish().values, stats_of(data).numeric["x"].sample.finish().values)
    for col in NUMERIC:
        values = data[col].replace([np.inf, -np.inf], np.nan).dropna()
        got = acc.numeric[col]
        assert got.count == len(values) and got.rows == len(data)
        assert got.mean == pytest.approx(values.mean(), rel=1e-12)
        assert got.std == pytest.approx(values.std(ddof=0), rel=1e-12)
        assert (got.min, got.max) == (values.min(), values.max())
        # All values fit in the sample: quantiles are exact.
        qs = np.linspace(0, 1, 101)
        assert got.quantiles(qs) == [float(q) for q in np.quantile(values.to_numpy(), qs)]
    city = acc.categorical["city"]
    assert city.nulls == int(data["city"].isna().sum())
    assert city.frequencies() == {k: int(v) for k, v in data["city"].dropna().value_counts().items()}
    assert list(city.frequencies()) == list(data["city"].dropna().value_counts().index)


def test_merge_of_two_accumulators_equals_one_pass_over_both():
    a, b = frame(3000, seed=1), frame(2000, seed=2)
    one = stats_of(pd.concat([a, b], ignore_index=True))
    # Each accumulator is given its rows' positions in the stream (a worker knows its rows' ids).
    merged = stats_of(a).merge(TableStats.for_columns(NUMERIC, CATEGORICAL).add(b, first_row=len(a)))
    assert merged.rows == one.rows
    for col in NUMERIC:
        m, o = merged.numeric[col], one.numeric[col]
        assert (m.rows, m.count, m.min, m.max) == (o.rows, o.count, o.min, o.max)
        assert m.mean == pytest.approx(o.mean, rel=1e-12) and m.m2 == pytest.approx(o.m2, rel=1e-12)
        assert np.array_equal(m.sample.finish().values, o.sample.finish().values)  # the sample does not depend on batches
    for col in CATEGORICAL:
        assert merged.categorical[col] == one.categorical[col]


def test_the_bottom_k_sample_is_order_free_seeded_and_uniform():
    data = frame(50_000)
    priority = row_priority(data)
    whole = BottomK(1000).add(data["x"].to_numpy(), priority)
    halves = BottomK(1000).add(data["x"].to_numpy()[25_000:], priority[25_000:]).merge(
        BottomK(1000).add(data["x"].to_numpy()[:25_000], priority[:25_000]))
    whole, halves = whole.finish(), halves.finish()
    assert np.array_equal(whole.values, halves.values) and len(whole.values) == 1000
    other_seed = BottomK(1000).add(data["x"].to_numpy(), row_priority(data, seed=1)).finish()
    assert not np.array_equal(whole.values, other_seed.values)
    # A uniform sample: its mean is within a few standard errors of the population's.
    assert abs(whole.values.mean() - data["x"].mean()) < 4 * data["x"].std() / np.sqrt(1000)


def test_quantiles_past_the_sample_are_within_the_documented_rank_error():
    acc = stats_of(frame(300_000))  # more finite values than the default sample holds
    values = np.sort(frame(300_000)["x"].to_numpy())
    for q, estimate in zip([0.01, 0.25, 0.5, 0.75, 0.99], acc.numeric["x"].quantiles(np.array([0.01, 0.25, 0.5, 0.75, 0.99])),
                           strict=True):
        rank = np.searchsorted(values, estimate) / len(values)
        assert abs(rank - q) < 5 * 0.5 / np.sqrt(100_000)


def test_distinct_count_is_exact_below_k_and_close_above():
    small = pd.Series(np.arange(500) % 321)
    assert DistinctCount(1000).add(value_hashes(small)).estimate() == 321
    big = pd.Series(np.arange(200_000))
    halves = DistinctCount(2000).add(value_hashes(big[:100_000])).merge(DistinctCount(2000).add(value_hashes(big[100_000:])))
    one = DistinctCount(2000).add(value_hashes(big))
    assert np.array_equal(halves.hashes, one.hashes)
    assert abs(one.estimate() / 200_000 - 1) < 4 / np.sqrt(2000 - 2)


def test_an_integer_category_is_one_category_whether_its_batch_holds_it_as_int_or_float():
    # A batch with a null holds the integer codes as float64 (17.0): streamed, the counts were split in two.
    codes = np.random.default_rng(0).integers(1, 6, 3000)
    as_float = pd.Series(codes[1000:], dtype="float64")
    as_float.iloc[0] = np.nan
    acc = TableStats.for_columns([], ["store"])
    acc.add(pd.DataFrame({"store": codes[:1000]}))
    acc.add(pd.DataFrame({"store": as_float}))
    expected = pd.Series(np.concatenate([codes[:1000], codes[1001:]])).value_counts()
    assert acc.categorical["store"].frequencies() == {str(k): int(v) for k, v in expected.items()}


def test_column_totals_of_a_numeric_column_with_an_all_null_batch_equal_pandas_over_every_row():
    from ctpipe.components.lib.data.stream_stats import ColumnTotals

    # A partition whose writer saw only nulls stores Arrow's null type: the batch reads as object, all None.
    batches = [pd.Series([1.5, 7.0, np.nan]), pd.Series([None, None], dtype=object), pd.Series([-2.0, 3.0])]
    totals = ColumnTotals()
    for b in batches:
        totals.add(b, len(b))
    every_row = pd.to_numeric(pd.concat(batches, ignore_index=True))
    assert totals.numeric  # before: the all-null batch made it a text column, so no exact range check was made
    assert (totals.min, totals.max, totals.nulls, totals.rows) == (every_row.min(), every_row.max(),
                                                                   int(every_row.isna().sum()), len(every_row))


def test_column_totals_of_a_text_column_count_a_numeric_batch_as_values():
    from ctpipe.components.lib.data.stream_stats import ColumnTotals

    # A category column that one partition writes as numeric codes: those values are present, and not text.
    batches = [pd.Series(["free", "pro", None]), pd.Series([0, 2]), pd.Series(["basic"])]
    totals = ColumnTotals()
    for b in batches:
        totals.add(b, len(b))
    assert not totals.numeric and (totals.rows, totals.nulls) == (6, 1)
    assert totals.counts == {"free": 1, "pro": 1, "basic": 1} and totals.numeric_values == 2


def test_rows_without_feature_columns_get_priorities_from_their_position_alone():
    # A text task's schema has no numeric or categorical feature: the snapshot's statistics hash a frame
    # without columns. pandas 2.3 and 3.0 raised there (3.0.6 on a GPU machine), pandas 3.1 gave a constant.
    frame = pd.DataFrame({"text": ["a", "b", "c", "d"]})[[]]
    priority = row_priority(frame, seed=3, first_row=10)
    position = pd.util.hash_array(np.arange(10, 14, dtype=np.int64))
    assert priority.dtype == np.uint64 and len(set(priority.tolist())) == 4
    assert priority.tolist() == (position * np.uint64(0x9E3779B97F4A7C15)).tolist()
