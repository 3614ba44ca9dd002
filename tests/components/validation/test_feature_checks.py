"""Checks beyond the suite, on purpose-built columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from components.data.reference_stats import compute_reference_stats
from components.data.snapshot import Schema
from components.validation.feature_checks import check_skew


def test_an_integer_coded_category_is_not_skewed_when_a_null_makes_the_newest_partition_float():
    rng = np.random.default_rng(0)
    schema = Schema(label=None, key=None, numeric=[], categorical=["store"], classes=[])
    reference = compute_reference_stats(pd.DataFrame({"store": rng.integers(1, 6, 5000)}), schema)
    newest = pd.DataFrame({"store": rng.integers(1, 6, 1000).astype("float64")})
    newest.loc[0, "store"] = np.nan
    (finding,) = check_skew(newest, reference, schema, "partition date=2026-01-02")
    assert finding.passed, finding.message  # before: PSI ~27 (every value "unseen"), a skew warning
    (shifted,) = check_skew(newest.assign(store=1.0), reference, schema, "partition date=2026-01-02")
    assert not shifted.passed
