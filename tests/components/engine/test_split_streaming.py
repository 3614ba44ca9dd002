"""Training encodes a split record batch by batch: the same tensors as encoding the whole frame."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ctpipe.components.engine.data import load_split, split_batches
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import (
    SnapshotWriter,
    assign_splits,
    infer_schema,
    load_snapshot,
    split_keys,
)
from ctpipe.components.tasks.tabular import make_task
from tests.fixtures.registry import tabular_arrays


def test_batched_loading_equals_encoding_the_whole_split(tmp_path):
    data = pd.concat([generate_day(d, 1500, 0, False, key_offset=d * 1500) for d in range(3)], ignore_index=True)
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    splits = assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.1, salt="s")
    writer = SnapshotWriter(tmp_path, schema, task=make_task(), row_group_rows=500)  # many record batches
    writer.add(data, splits)
    writer.close(data_uri="mem://", files=[], fingerprint="f")
    snap = load_snapshot(tmp_path)
    assert len(list(split_batches(snap, "train"))) > 5
    loaded = load_split(snap, "train", make_task()).examples
    x_num, x_cat, y = tabular_arrays(snap, "train")
    whole = make_task().codec.encode(snap.frame("train"), snap.state)
    assert torch.equal(loaded.inputs[0], torch.tensor(x_num)) and torch.equal(loaded.inputs[1], torch.tensor(x_cat))
    assert torch.equal(loaded.targets, torch.tensor(np.asarray(y)))
    assert all(torch.equal(a, b) for a, b in zip(loaded.inputs, whole.inputs, strict=True))
    assert torch.equal(loaded.targets, whole.targets)
