"""Checks beyond the suite, on purpose-built columns."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.reference_stats import compute_reference_stats
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.steps.validate_data.feature_checks import check_skew


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


def rare_positive_frame(rows: int = 6000, seed: int = 0) -> pd.DataFrame:
    """0.6% positives, as fraud or rare churn; ``chargeback_flag`` is the label in disguise."""
    from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN

    rng = np.random.default_rng(seed)
    label = np.where(rng.random(rows) < 0.006, "fraud", "ok")
    return pd.DataFrame({
        "amount": rng.gamma(2.0, 50.0, rows), "country": rng.choice(list("abcd"), rows),
        "chargeback_flag": (label == "fraud").astype("int64"), "label": label,
        SPLIT_COLUMN: rng.choice(["train", "val", "test"], rows, p=[0.8, 0.1, 0.1])})


def test_a_leaked_feature_is_caught_when_one_class_is_almost_every_row():
    from ctpipe.components.steps.validate_data.feature_checks import check_label_leakage

    schema = Schema(label="label", key=None, numeric=["amount", "chargeback_flag"], categorical=["country"],
                    classes=["fraud", "ok"])
    findings = {f.column: f for f in check_label_leakage(rare_positive_frame(20_000), schema, 0.99)}
    # Before: the majority baseline (0.994) passed the threshold, so no column was judged and nothing was said.
    leaked = findings["chargeback_flag"]
    assert not leaked.passed and leaked.severity == "error" and not leaked.not_applicable
    assert "balanced accuracy 1.000" in leaked.message and "chargeback_flag" in leaked.message
    assert findings["amount"].passed and findings["country"].passed
    assert not findings["amount"].not_applicable
    # Too few held-out rows of the rare class to tell a leak from chance: said, not silently skipped.
    few = {f.column: f for f in check_label_leakage(rare_positive_frame(2_000), schema, 0.99)}
    assert few["chargeback_flag"].not_applicable and "not judged" in few["chargeback_flag"].message


def test_rare_positive_data_gives_no_false_leakage():
    from ctpipe.components.steps.validate_data.feature_checks import check_label_leakage

    schema = Schema(label="label", key=None, numeric=["amount", "weak", "visits", "chargeback_flag"],
                    categorical=["country", "city"],
                    classes=["fraud", "ok"])
    for seed in range(10):
        frame = rare_positive_frame(20_000, seed)
        rng = np.random.default_rng(100 + seed)
        frame["weak"] = rng.normal(size=len(frame)) + 1.5 * (frame["label"] == "fraud")  # a real, imperfect signal
        frame["visits"] = rng.integers(0, 5, len(frame))
        frame["city"] = rng.choice([f"c{i}" for i in range(5000)], len(frame))  # ~4 rows a value
        failed = [f.message for f in check_label_leakage(frame, schema, 0.99) if not f.passed]
        assert [m.split("'")[1] for m in failed] == ["chargeback_flag"], (seed, failed)


def test_an_integer_or_text_column_unique_on_every_row_is_an_error_naming_the_key_setting():
    """Before: integer identifiers only warned, and the model trained on them. A float measurement with all
    values distinct is no identifier; a column unique on most but not all rows stays a warning."""
    from ctpipe.components.steps.validate_data.feature_checks import check_id_like_columns
    from ctpipe.components.steps.validate_data.findings import ERROR, WARNING

    rows = 400
    rng = np.random.default_rng(1)
    frame = pd.DataFrame({
        "order_id": rng.permutation(rows) + 10_000, "ticket": [f"t-{i}" for i in rng.permutation(rows)],
        "spend": rng.gamma(2.0, 30.0, rows), "visits": rng.integers(0, 9, rows),
        "mostly_unique": np.where(np.arange(rows) < 10, 0, np.arange(rows))})
    schema = Schema(label=None, key=None, numeric=["order_id", "spend", "visits", "mostly_unique"],
                    categorical=["ticket"], classes=[])
    found = {f.column: f for f in check_id_like_columns(frame, schema)}
    assert set(found) == {"order_id", "ticket", "mostly_unique"}
    for column in ("order_id", "ticket"):
        assert found[column].severity == ERROR and f"--set data.key={column}" in found[column].message
    assert found["mostly_unique"].severity == WARNING
