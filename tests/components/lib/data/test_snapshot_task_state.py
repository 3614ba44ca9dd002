"""The streamed snapshot's task state and split loading: the same as fitting and encoding whole frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from ctpipe.components.engine.data import load_split
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import (
    SnapshotWriter,
    assign_splits,
    infer_schema,
    load_snapshot,
    split_keys,
)
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents
from ctpipe.components.tasks.causal_lm.task import make_task as make_lm_task
from ctpipe.components.tasks.tabular import TabularClassification
from ctpipe.components.tasks.tabular import make_task as make_tabular_task
from ctpipe.task import task_spec


def _write(tmp_path, data, schema, task, rows_per_group):
    splits = assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.1, salt="s")
    writer = SnapshotWriter(tmp_path, schema, row_group_rows=rows_per_group, task=task)
    for start in range(0, len(data), 997):  # several record batches, as the streamed step adds them
        chunk = data.iloc[start : start + 997]
        writer.add(chunk, splits.iloc[start : start + 997])
    writer.close(data_uri="mem://", files=[], fingerprint="f")
    return load_snapshot(tmp_path)


def test_tabular_state_from_streamed_statistics_equals_fit_on_the_train_frame(tmp_path):
    data = pd.concat([generate_day(d, 1200, 0, False, key_offset=d * 1200) for d in range(3)], ignore_index=True)
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    task = make_tabular_task()
    snap = _write(tmp_path, data, schema, task, 400)
    expected = task.codec.fit(snap.frame("train"), schema)
    assert snap.state["categorical"] == expected["categorical"] and snap.state["label"] == expected["label"]
    for col, st in expected["numeric"].items():
        assert abs(snap.state["numeric"][col]["mean"] - st["mean"]) < 1e-9 * max(1.0, abs(st["mean"]))
        assert abs(snap.state["numeric"][col]["std"] - st["std"]) < 1e-9 * max(1.0, abs(st["std"]))


def test_a_packing_task_is_fitted_and_encoded_on_whole_splits(tmp_path):
    docs = help_topic_documents().head(300)
    schema = infer_schema(docs, label=None, key="doc_id", features=["text"], categorical=[])
    task = make_lm_task()
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    assert not task.codec.rowwise
    snap = _write(tmp_path, docs, schema, task, 50)  # many row groups: chunked packing would differ
    train = snap.frame("train")
    assert snap.state == task.codec.fit(train, schema)
    loaded = load_split(snap, "train", task).examples
    whole = task.codec.encode(train, snap.state)
    assert all(torch.equal(a, b) for a, b in zip(loaded.inputs, whole.inputs, strict=True))
    assert torch.equal(loaded.targets, whole.targets)


class _NumpyScalarState(TabularClassification):
    """A user's fit_streamed/fit that keeps a numpy scalar (``x.mean()`` of an array) in the state (through the
    statistics-only part both build on: a table this small is fitted by ``fit``, which needs its rows)."""

    def streamed_state(self, stats, schema):
        return {**super().streamed_state(stats, schema), "scale": np.float32(2.0)}


class _IntKeyedState(TabularClassification):
    """A state keyed by ints: JSON turns 0 into "0", so the loaded state would no longer be the fitted one."""

    def streamed_state(self, stats, schema):
        return {**super().streamed_state(stats, schema), "weights": {0: 1.0, 1: 2.0}}


@pytest.mark.parametrize("task, named", [
    (task_spec(_NumpyScalarState()), r"state\['scale'\] is a numpy\.float32"),
    (task_spec(_IntKeyedState()), r"state\['weights'\] has the key 0 \(int\), which JSON turns into \"0\""),
])
def test_a_state_that_is_not_plain_json_is_named_with_the_part_that_made_it(tmp_path, task, named):
    # Before: "Object of type float32 is not JSON serializable" (nothing named), or the int keys silently
    # became strings in preprocessing.json, so every later step saw another state than the fitted one.
    data = pd.concat([generate_day(d, 300, 0, False, key_offset=d * 300) for d in range(2)], ignore_index=True)
    schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
    with pytest.raises(ConfigError, match=rf"task 'tabular_classification': fit returned a state that is not plain JSON "
                                        rf"\({named}\)"):
        _write(tmp_path, data, schema, task, 400)


def test_a_task_column_missing_from_the_data_names_the_setting_that_picks_it():
    """Before: the error listed the feature columns but not how to name the task's column."""
    from ctpipe.components.lib.data.snapshot import Schema
    from ctpipe.components.lib.errors import UserError

    schema = Schema(label=None, key="doc_id", numeric=[], categorical=["body"], classes=[])
    with pytest.raises(UserError, match=r"column\(s\) text.*feature columns: body.*--set data\.text_column=COLUMN"):
        schema.with_task_columns(["text"])
