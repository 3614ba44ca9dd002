"""The sanity samples are read by row group, and are the rows the whole-frame draw would pick."""

from __future__ import annotations

import pandas as pd
import torch

from ctpipe.components.engine.data import first_batch_indices
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import (
    SnapshotWriter,
    assign_splits,
    infer_schema,
    load_snapshot,
    split_keys,
)
from ctpipe.components.steps.sanity_checks.sample import (
    HELD_OUT_FACTOR,
    class_floor,
    load_sanity_data,
    stratified_rows,
)
from ctpipe.components.tasks.tabular import make_task
from tests.fixtures.registry import tabular_preprocessing


def test_streamed_samples_equal_the_whole_frame_draw(tmp_path):
    data = pd.concat([generate_day(d, 2000, 0, False, key_offset=d * 2000) for d in range(3)], ignore_index=True)
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    splits = assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.1, salt="s")
    writer = SnapshotWriter(tmp_path, schema, task=make_task(), row_group_rows=700)
    writer.add(data, splits)
    writer.close(data_uri="mem://", files=[], fingerprint="f")
    snap = load_snapshot(tmp_path)
    cfg = Config.from_dict({"sanity": {"sample_rows": 256}, "train": {"batch_size": 32}})
    got = load_sanity_data(snap, cfg, make_task())

    # The same draw on whole frames, as the step did before it streamed.
    train, val = snap.frame("train"), snap.frame("val")
    floor = class_floor(256, len(tabular_preprocessing(snap).classes))
    labels = train["label"].astype(str)
    half = (labels.value_counts().reindex(sorted(labels.unique())).to_numpy() + 1) // 2
    picked = stratified_rows(train["label"], 256, seed=0, floor=floor, cap=half)
    rest = pd.concat([train.drop(index=train.index[picked]), val], ignore_index=True)
    held = rest.iloc[stratified_rows(rest["label"], HELD_OUT_FACTOR * 256, seed=0, floor=floor)]
    first = train.iloc[first_batch_indices(len(train), batch_size=32, world_size=2, seed=cfg.train.seed)]
    index = {c: i for i, c in enumerate(tabular_preprocessing(snap).classes)}
    assert torch.equal(got.train.targets, torch.tensor(train.iloc[picked]["label"].map(index).to_numpy()))
    assert torch.equal(got.val.targets, torch.tensor(held["label"].map(index).to_numpy()))
    pd.testing.assert_frame_equal(got.first_batch.raw, first.reset_index(drop=True))
    assert got.val.inputs[0].shape[0] == len(held)
