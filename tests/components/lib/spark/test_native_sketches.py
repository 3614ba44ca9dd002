"""Spark 4.1's own DataSketches functions give bytes that ctpipe's sketches load and merge."""

from __future__ import annotations

import datasketches as ds
import numpy as np
import pandas as pd

from ctpipe.components.lib.sketches.column_sketch import HLL_LG_K, KLL_K, CategoricalSketch, NumericSketch


def test_sparks_kll_and_hll_sketches_merge_with_ctpipes(spark):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"x": rng.normal(size=30_000), "c": rng.integers(0, 500, 30_000).astype(str)})
    row = spark.createDataFrame(frame.iloc[:15_000]).agg(
        F.kll_sketch_agg_double("x", F.lit(KLL_K)).alias("kll"), F.hll_sketch_agg("c", F.lit(HLL_LG_K)).alias("hll"),
    ).collect()[0]
    ours = NumericSketch().add(frame["x"].iloc[15_000:], np.arange(15_000, dtype=np.uint64))
    ours.kll.merge(ds.kll_doubles_sketch.deserialize(bytes(row["kll"])))
    assert ours.kll.n == 30_000
    ordered = np.sort(frame["x"].to_numpy())
    qs = [0.01, 0.5, 0.99]
    ranks = np.searchsorted(ordered, ours.kll.get_quantiles(qs, inclusive=True), side="right") / len(ordered)
    assert np.max(np.abs(ranks - qs)) < 0.003
    cats = CategoricalSketch().add(frame["c"].iloc[15_000:])
    union = ds.hll_union(HLL_LG_K)
    union.update(cats.hll)
    union.update(ds.hll_sketch.deserialize(bytes(row["hll"])))
    assert abs(union.get_result().get_estimate() - 500) < 500 * 0.05
