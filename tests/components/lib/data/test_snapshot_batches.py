"""A snapshot written batch by batch equals one written from one frame, and its splits stream back."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow.parquet as pq

from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import (
    SnapshotWriter,
    assign_splits,
    infer_schema,
    load_snapshot,
    split_keys,
)
from ctpipe.components.lib.data.split_files import SplitWriter
from ctpipe.components.tasks.tabular import make_task
from tests.fixtures.registry import tabular_preprocessing


def _data():
    data = pd.concat([generate_day(d, 3000, 0, False, key_offset=d * 3000) for d in range(3)], ignore_index=True)
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    splits = assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.1, salt="s")
    return data, schema, splits


def _write(root, data, schema, splits, batch_rows):
    writer = SnapshotWriter(root, schema, task=make_task())
    for start in range(0, len(data), batch_rows):
        writer.add(data.iloc[start : start + batch_rows], splits.iloc[start : start + batch_rows])
    return writer.close(data_uri="mem://", files=[], fingerprint="f")


def test_batches_give_the_same_snapshot_as_one_frame(tmp_path):
    data, schema, splits = _data()
    one = _write(tmp_path / "one", data, schema, splits, len(data))
    many = _write(tmp_path / "many", data, schema, splits, 1000)
    for split in ("train", "val", "test"):
        pd.testing.assert_frame_equal(one.frame(split), many.frame(split))
        assert one.rows(split) == int((splits == split).sum())
    a, b = tabular_preprocessing(one).to_dict(), tabular_preprocessing(many).to_dict()
    assert a["categorical"] == b["categorical"] and a["classes"] == b["classes"]
    for col, st in a["numeric"].items():
        assert abs(st["mean"] - b["numeric"][col]["mean"]) < 1e-9 and abs(st["std"] - b["numeric"][col]["std"]) < 1e-9
    ref_a = json.loads((tmp_path / "one" / "reference_stats.json").read_text())
    ref_b = json.loads((tmp_path / "many" / "reference_stats.json").read_text())
    assert ref_a["rows"] == ref_b["rows"] == one.rows("train")
    for col in schema.numeric:
        assert ref_a["numeric"][col]["sample"] == ref_b["numeric"][col]["sample"]
        assert ref_a["numeric"][col]["quantiles"] == ref_b["numeric"][col]["quantiles"]
    # Preprocessing as the exact pandas figures of the train rows.
    train = data[splits == "train"]
    assert abs(a["numeric"]["tenure_months"]["mean"] - train["tenure_months"].mean()) < 1e-9
    assert abs(a["numeric"]["sessions_last_30d"]["std"] - train["sessions_last_30d"].std(ddof=0)) < 1e-9


def test_splits_stream_back_in_bounded_row_groups(tmp_path):
    frame = pd.DataFrame({"x": range(10_000), "y": ["a"] * 10_000})
    writer = SplitWriter(tmp_path / "t.parquet", row_group_rows=3000)
    writer.write(frame.iloc[:6000])
    writer.write(frame.iloc[6000:])
    writer.close(frame)
    handle = pq.ParquetFile(tmp_path / "t.parquet")
    assert max(handle.metadata.row_group(i).num_rows for i in range(handle.num_row_groups)) <= 3000


def test_snapshot_batches_cover_the_split_in_order(tmp_path):
    data, schema, splits = _data()
    snap = load_snapshot(_write(tmp_path / "s", data, schema, splits, 2000).root)
    streamed = pd.concat(list(snap.batches("train")), ignore_index=True)
    pd.testing.assert_frame_equal(streamed, snap.frame("train"))
