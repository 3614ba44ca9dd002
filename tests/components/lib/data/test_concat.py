"""Partitions read into one frame keep their values: old rows keep their split, numeric columns stay numeric."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.simulate import mixed_type_rows, write_partition
from ctpipe.components.lib.data.snapshot import (
    infer_schema,
    list_data_files,
    read_data,
    training_split_record,
)
from ctpipe.components.lib.data.splits import SplitSettings, split_keys
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.components.lib.data.test_splits import _old_rows_moved, _splits

BIG = 2**62  # ids this large (64-bit hashes, snowflake ids) are not all representable as float64


def _write_without_pandas_metadata(root: Path, day: str, frame: pd.DataFrame) -> None:
    """As a non-pandas writer (Spark, a warehouse export) does: an int64 column with nulls reads back as float64."""
    part = root / f"date={day}"
    part.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False).replace_schema_metadata(None),
                   part / "part-0.parquet")


@pytest.mark.parametrize("new_dtype", ["float64", "int64"])
def test_an_old_float32_partition_keeps_its_split_when_a_wider_partition_arrives(tmp_path, new_dtype):
    for seed in range(4):
        rng = np.random.default_rng(seed)
        old = mixed_type_rows(rng, 120, 0).astype({"ratio": "float32"})
        new = mixed_type_rows(rng, 40, 1000)
        new["ratio"] = (new["ratio"] * 100).round().astype(new_dtype)
        moved = _old_rows_moved(tmp_path / str(seed), old, new, None)  # content keys: the float is hashed
        assert moved == 0, f"seed {seed}: {moved} of {len(old)} float32 rows changed split ({new_dtype} partition)"


def test_ids_beyond_2_53_keep_their_split_when_a_partition_with_a_null_arrives(tmp_path):
    rng = np.random.default_rng(0)
    old = mixed_type_rows(rng, 120, 0).assign(account=BIG + np.arange(120, dtype="int64") * 7)
    new = mixed_type_rows(rng, 40, 1000).assign(account=pd.array([BIG + 7 * 1000 + i for i in range(39)] + [None],
                                                                  dtype="Int64"))
    before, after = tmp_path / "before", tmp_path / "after"
    write_partition(before, "2026-01-01", old)
    write_partition(after, "2026-01-01", old)
    _write_without_pandas_metadata(after, "2026-01-02", new)
    assert read_data(str(after), list_data_files(str(after)))["account"].iloc[:120].tolist() == old["account"].tolist()
    was = _splits(before, None).set_index("id")["split"]
    now = _splits(after, None)
    now = now[now["part"] == "date=2026-01-01"].set_index("id")["split"]
    assert int((was != now.loc[was.index]).sum()) == 0


def test_keys_beyond_2_53_keep_their_split_when_a_partition_stores_them_as_floats(tmp_path):
    rng = np.random.default_rng(1)
    old = mixed_type_rows(rng, 120, 0).assign(customer_id=BIG + np.arange(120, dtype="int64") * 7)
    # Floats that hold their integers exactly (multiples of 1024 at this size): nothing to round.
    new = mixed_type_rows(rng, 40, 1000).assign(customer_id=(BIG + 2**20 + np.arange(40) * 1024).astype("float64"))
    root = tmp_path / "data"
    write_partition(root, "2026-01-01", old)
    write_partition(root, "2026-01-02", new)
    data = read_data(str(root), list_data_files(str(root)))
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    keys = split_keys(data, schema)  # before: the old keys were rounded, and collided with different labels
    assert keys.iloc[:120].tolist() == [str(v) for v in old["customer_id"]]
    assert keys.iloc[120:].tolist() == [str(int(v)) for v in new["customer_id"]]


def test_a_column_mixing_ids_beyond_2_53_with_fractions_is_a_data_error_naming_it(tmp_path):
    rng = np.random.default_rng(2)
    root = tmp_path / "data"
    write_partition(root, "2026-01-01", mixed_type_rows(rng, 20, 0).assign(account=BIG + np.arange(20, dtype="int64")))
    write_partition(root, "2026-01-02", mixed_type_rows(rng, 20, 100).assign(account=np.linspace(0.5, 9.5, 20)))
    with pytest.raises(DataValidationError) as caught:
        read_data(str(root), list_data_files(str(root)))
    assert "column 'account'" in str(caught.value) and "partition date=2026-01-02" in str(caught.value)


def test_a_partition_where_columns_are_all_null_or_empty_keeps_numeric_columns_numeric(tmp_path):
    rng = np.random.default_rng(3)
    root = tmp_path / "data"
    write_partition(root, "2026-01-01", mixed_type_rows(rng, 50, 0))
    # A writer that saw only nulls stores Arrow's null type (read back as object); a day with no rows as a header.
    write_partition(root, "2026-01-02", mixed_type_rows(rng, 50, 100).assign(spend=None, tickets=None))
    (root / "date=2026-01-03").mkdir()
    (root / "date=2026-01-03" / "part-0.csv").write_text(",".join(mixed_type_rows(rng, 1, 0).columns) + "\n")
    data = read_data(str(root), list_data_files(str(root)))
    assert str(data["spend"].dtype) == "float64" and str(data["tickets"].dtype) == "float64"
    assert str(data["customer_id"].dtype) == "int64"  # the header-only day adds no nulls
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    assert {"spend", "tickets", "ratio"} <= set(schema.numeric), schema


def test_a_streamed_snapshot_of_float32_and_float64_partitions_records_the_split_it_was_made_with(tmp_path):
    rng = np.random.default_rng(4)
    root = tmp_path / "data"
    write_partition(root, "2026-01-01", mixed_type_rows(rng, 300, 0).astype({"ratio": "float32"}))
    write_partition(root, "2026-01-02", mixed_type_rows(rng, 300, 1000))
    digests = []
    for in_memory_rows in (10**9, 0):  # the whole data in one frame, then streamed in record batches
        cfg = Config.from_dict({"data": {"key": None}, "validation": {"in_memory_rows": in_memory_rows}})
        snapshot = build_snapshot(str(root), cfg, tmp_path / f"snapshot{in_memory_rows}")
        # Before: the streamed snapshot widened float32 values on writing, and its train rows no longer hashed to train.
        digests.append(training_split_record(snapshot, SplitSettings.from_config(cfg.data))["train_keys_sha256"])
    assert digests[0] == digests[1]
