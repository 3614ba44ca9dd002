"""Stable splits: old rows keep their split however new partitions store their values.

The property tests write real partitions (Parquet and CSV), read them back with the pipeline's reader
and split them with the pipeline's functions, for many random datasets per transformation.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.simulate import mixed_type_rows, write_partition
from ctpipe.components.lib.data.snapshot import (
    PARTITION_COLUMN,
    assign_splits,
    infer_schema,
    list_data_files,
    read_data,
    split_keys,
)
from ctpipe.components.lib.errors import DataValidationError

SEEDS = range(12)


def _splits(root, key: str | None) -> pd.DataFrame:
    """Read the data root as the pipeline does and split it; returns id, partition and split per row."""
    data = read_data(str(root), list_data_files(str(root)))
    schema = infer_schema(data, label="label", key=key, features=[], categorical=[])
    splits = assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.3, salt="s")
    return pd.DataFrame(
        {"id": data["customer_id"].astype("float64").astype("int64"), "part": data[PARTITION_COLUMN], "split": splits}
    )


def _old_rows_moved(tmp_path, old: pd.DataFrame, new: pd.DataFrame, key: str | None, fmt_new: str = "parquet") -> int:
    before_root, after_root = tmp_path / "before", tmp_path / "after"
    write_partition(before_root, "2026-01-01", old)
    write_partition(after_root, "2026-01-01", old)
    write_partition(after_root, "2026-01-02", new, fmt_new)
    before = _splits(before_root, key).set_index("id")["split"]
    after = _splits(after_root, key)
    after = after[after["part"] == "date=2026-01-01"].set_index("id")["split"]
    assert len(after) == len(before) == len(old)
    return int((before != after.loc[before.index]).sum())


# --- the transformations of a new partition --------------------------------------------------


def _with_null_int(new: pd.DataFrame) -> pd.DataFrame:
    out = new.copy()
    out["tickets"] = out["tickets"].astype("float64")
    out.loc[0, "tickets"] = np.nan  # one null turns the concatenated column into float64
    return out


def _key_as_float(new: pd.DataFrame) -> pd.DataFrame:
    return new.assign(customer_id=new["customer_id"].astype("float64"))


def _strings_as_category(new: pd.DataFrame) -> pd.DataFrame:
    return new.assign(region=new["region"].astype("category"), label=new["label"].astype("category"))


def _strings_as_object(new: pd.DataFrame) -> pd.DataFrame:
    return new.assign(region=new["region"].astype(object))


def _floats_as_float32_ints_as_int32(new: pd.DataFrame) -> pd.DataFrame:
    return new.assign(ratio=new["ratio"].astype("float32"), tickets=new["tickets"].astype("int32"))


def _new_column(new: pd.DataFrame) -> pd.DataFrame:
    return new.assign(plan=np.where(np.arange(len(new)) % 2 == 0, "pro", "free"))


def _bool_with_null(new: pd.DataFrame) -> pd.DataFrame:
    out = new.assign(active=new["active"].astype(object))
    out.loc[1, "active"] = None
    return out


TRANSFORMS = {
    "null_in_int_column": _with_null_int,
    "key_stored_as_float": _key_as_float,
    "strings_as_category": _strings_as_category,
    "strings_as_object": _strings_as_object,
    "float32_and_int32": _floats_as_float32_ints_as_int32,
    "new_column": _new_column,
    "bool_with_null": _bool_with_null,
}


@pytest.mark.parametrize("key", [None, "customer_id"], ids=["content", "key"])
@pytest.mark.parametrize("transform", list(TRANSFORMS))
def test_old_rows_keep_their_split_when_a_new_partition_changes_dtypes(tmp_path, transform, key):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        old = mixed_type_rows(rng, 120, 0)
        new = TRANSFORMS[transform](mixed_type_rows(rng, 40, 1000))
        moved = _old_rows_moved(tmp_path / str(seed), old, new, key)
        assert moved == 0, f"seed {seed}: {moved} of {len(old)} old rows changed split ({transform}, key={key})"


@pytest.mark.parametrize("key", [None, "customer_id"], ids=["content", "key"])
def test_csv_and_parquet_of_the_same_rows_split_alike(tmp_path, key):
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        rows = mixed_type_rows(rng, 150, 0)
        # Digit-only string ids read back from CSV as integers; float32 values come back as float64.
        rows = rows.assign(ratio=rows["ratio"].astype("float32"))
        parquet_root, csv_root = tmp_path / f"p{seed}", tmp_path / f"c{seed}"
        write_partition(parquet_root, "2026-01-01", rows.assign(customer_id=rows["customer_id"].astype(str)))
        write_partition(csv_root, "2026-01-01", rows, "csv")
        from_parquet = _splits(parquet_root, key).set_index("id")["split"]
        from_csv = _splits(csv_root, key).set_index("id")["split"]
        assert (from_parquet == from_csv.loc[from_parquet.index]).all(), f"seed {seed}"


def _with_datetimes(rows: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """A date-only column and one with times, as an event table has (written to CSV as ISO text)."""
    day = pd.Timestamp("2025-01-01") + pd.to_timedelta(rng.integers(0, 400, len(rows)), unit="D")
    moment = pd.Timestamp("2025-01-01") + pd.to_timedelta(rng.integers(0, 10**9, len(rows)), unit="ms")
    return rows.assign(signup_day=day, last_seen=moment)


@pytest.mark.parametrize("key", [None, "last_seen"], ids=["content", "datetime_key"])
def test_csv_and_parquet_of_the_same_rows_with_datetimes_split_alike(tmp_path, key):
    # Parquet keeps datetimes as datetimes; CSV has no types, so they come back as ISO 8601 text.
    for seed in range(4):
        rng = np.random.default_rng(seed)
        rows = _with_datetimes(mixed_type_rows(rng, 150, 0), rng)
        parquet_root, csv_root = tmp_path / f"p{seed}", tmp_path / f"c{seed}"
        write_partition(parquet_root, "2026-01-01", rows)
        write_partition(csv_root, "2026-01-01", rows, "csv")
        from_parquet = _splits(parquet_root, key).set_index("id")["split"]
        from_csv = _splits(csv_root, key).set_index("id")["split"]
        moved = int((from_parquet != from_csv.loc[from_parquet.index]).sum())
        assert moved == 0, f"seed {seed}: {moved} of {len(rows)} rows split differently from CSV than from Parquet"


def test_iso_text_is_hashed_as_the_datetime_it_names_and_other_text_as_it_stands():
    from ctpipe.components.lib.data.splits import key_texts

    texts = ["2025-03-01", "2025-03-01 00:00:00", "2025-03-01T01:00:00+01:00", "2025-03-01T00:00:00.000Z",
             "2025-02-30", "20250301", "2025-03-01 and more"]
    frame = pd.DataFrame({"k": texts, "label": "a"})
    keys = key_texts(frame, "k", "label").tolist()
    assert keys[:4] == ["2025-03-01T00:00:00.000000"] * 4
    assert keys[4:] == texts[4:]  # no such day, not ISO 8601, more than a date: the text itself
    assert key_texts(frame.astype({"k": "category"}), "k", "label").tolist() == keys
    assert key_texts(frame, "k", "label", form="ctpipe-split/v2").tolist() == texts


def test_a_csv_partition_appended_to_parquet_moves_no_old_row(tmp_path):
    for seed in range(4):
        rng = np.random.default_rng(seed)
        old, new = mixed_type_rows(rng, 100, 0), mixed_type_rows(rng, 30, 500)
        assert _old_rows_moved(tmp_path / str(seed), old, new, None, fmt_new="csv") == 0


# --- the canonical form -------------------------------------------------------------------------


def test_canonical_text_of_equal_values_is_equal_across_dtypes():
    from ctpipe.components.lib.data.splits import canonical_text

    pairs = [
        (pd.Series([5, -3, 0], dtype="int64"), pd.Series([5.0, -3.0, -0.0])),
        (pd.Series([5, 7], dtype="int32"), pd.Series(["5", "7"], dtype=object)),
        (pd.Series([0.1, 2.5]), pd.Series([0.1, 2.5], dtype="float32")),
        (pd.Series(["a", "b"]), pd.Series(["a", "b"], dtype="category")),
        (pd.Series([1, 2], dtype="Int64"), pd.Series([1, 2], dtype="int8")),
        (pd.Series([True, False]), pd.Series([True, False], dtype=object)),
        (pd.Series([1.5, 2]), pd.Series([1.5, 2], dtype=object)),
        (pd.Series([3, 4]).astype("category"), pd.Series([3.0, 4.0])),
    ]
    for left, right in pairs:
        assert canonical_text(left).tolist() == canonical_text(right).tolist(), (left.dtype, right.dtype)
    assert canonical_text(pd.Series([1.0, np.nan, None], dtype=object)).tolist() == ["1", None, None]
    assert canonical_text(pd.Series([0.1, 1e-5, 1e22, np.inf])).tolist() == ["0.1", "1e-05", "10000000000000000000000", "inf"]
    # Different values stay different: a float is not rounded, a bool is not the integer 1.
    assert canonical_text(pd.Series([0.5]))[0] != canonical_text(pd.Series([1]))[0]
    assert canonical_text(pd.Series([True], dtype=object))[0] != canonical_text(pd.Series([1], dtype=object))[0]
    assert canonical_text(pd.Series([True, 1], dtype=object)).tolist() == ["true", "1"]


def test_the_vectorised_float_text_matches_the_per_value_text():
    from ctpipe.components.lib.data.splits import canonical_text

    values = np.random.default_rng(0).lognormal(0, 4, 2000) * np.random.default_rng(1).choice([-1, 1], 2000)
    vectorised = canonical_text(pd.Series(values)).tolist()
    per_value = canonical_text(pd.Series(values, dtype=object)).tolist()
    assert vectorised == per_value


def test_a_key_splits_by_the_documented_salted_hash():
    from ctpipe.components.lib.data.splits import canonical_text

    keys = pd.Series([5, 17, 123456789], dtype="int64")
    out = assign_splits(canonical_text(keys), val_fraction=0.1, test_fraction=0.3, salt="s")
    for text, split in zip(["5", "17", "123456789"], out, strict=True):
        u = int.from_bytes(hashlib.blake2b(b"s\0" + text.encode(), digest_size=8).digest(), "big") / 2**64
        assert split == ("test" if u < 0.3 else "val" if u < 0.4 else "train")


# --- data errors ---------------------------------------------------------------------------------


def test_a_null_key_is_a_data_error_naming_the_column_and_rows():
    data = mixed_type_rows(np.random.default_rng(0), 10, 0).astype({"customer_id": "float64"})
    data.loc[[3, 7], "customer_id"] = np.nan
    data[PARTITION_COLUMN] = "date=2026-01-02"
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    with pytest.raises(DataValidationError, match="customer_id") as err:
        split_keys(data, schema)
    message = str(err.value)
    assert "2 row(s)" in message and "partition date=2026-01-02 rows 3, 7" in message


def test_a_key_repeated_with_another_label_is_a_data_error_naming_the_key_and_rows():
    data = mixed_type_rows(np.random.default_rng(0), 10, 0)
    data.loc[4, "customer_id"] = 2
    data.loc[4, "label"] = "b" if data.loc[2, "label"] == "a" else "a"
    data[PARTITION_COLUMN] = "date=2026-01-01"
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    with pytest.raises(DataValidationError, match="customer_id") as err:
        split_keys(data, schema)
    assert "'2' at partition date=2026-01-01 rows 2, 4" in str(err.value)
    # A repeated key with the same label (a re-delivered row) keeps one split and is no error.
    data.loc[4, "label"] = data.loc[2, "label"]
    keys = split_keys(data, schema)
    assert keys[2] == keys[4]


# --- the canonical form a champion's split was hashed by ---------------------------------------


def test_a_champion_split_by_the_previous_form_is_recomputed_by_that_form():
    from ctpipe.components.lib.data.snapshot import Schema
    from ctpipe.components.lib.data.splits import CANONICAL_FORM, SplitSettings
    from ctpipe.components.steps.evaluate.leakage import champion_training_overlap

    rng = np.random.default_rng(0)
    schema = Schema(label="label", key=None, numeric=[], categorical=[], classes=[])
    settings = SplitSettings(key=None, salt="s", val_fraction=0.1, test_fraction=0.3)
    plain = mixed_type_rows(rng, 400, 0)
    # v2 hashed ISO text as it stands, v3 as the datetime it names: only rows with such text differ.
    dated = _with_datetimes(plain, rng)
    dated = dated.assign(signup_day=dated["signup_day"].dt.strftime("%Y-%m-%d"), last_seen=dated["last_seen"].astype(str))
    for rows, moved in ((plain, False), (dated, True)):
        test = rows[settings.assign(split_keys(rows, schema)).to_numpy() == "test"]
        v2 = {**settings.to_dict(), "canonical_form": "ctpipe-split/v2"}
        check = champion_training_overlap(v2, test, schema, version="1")
        if moved:  # the v2 champion trained on some of today's test rows: counted, not compared
            assert not check.ok and check.overlap_rows > 0.3 * len(test), check
        else:
            assert check.ok and check.overlap_rows == 0, check
        assert champion_training_overlap(settings.to_dict(), test, schema, version="1").ok
    assert settings.canonical_form == CANONICAL_FORM
    unknown = champion_training_overlap({**settings.to_dict(), "canonical_form": "ctpipe-split/v1"}, plain, schema,
                                        version="1")
    assert not unknown.ok and "ctpipe-split/v1" in unknown.message


def test_the_streamed_keys_digest_equals_the_digest_of_all_keys_at_once():
    from ctpipe.components.lib.data.splits import keys_digest, streamed_keys_digest

    batches = [
        ["b", "a", "zz", "a"],
        [],
        ["a", "line\nbreak", "\udc80 escaped byte", "é", "\ud7ff", "\ue000"],
        ["zz", "c", "b"],
    ]
    assert streamed_keys_digest(iter(batches)) == keys_digest(k for batch in batches for k in batch)
    assert streamed_keys_digest(iter([])) == keys_digest([])
