"""Selection past one pod's memory: the export's split record and its re-scoring stream the snapshot's
split files a row group at a time and give what reading the whole splits gave."""

from __future__ import annotations

import pandas as pd
import pytest

from ctpipe.components.lib.data.snapshot import Snapshot, load_snapshot, training_split_record
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.select_checkpoint.select import score_export
from tests.fixtures.registry import make_model, make_snapshot

NO_KEY = SplitSettings(key=None, salt="t", val_fraction=0.1, test_fraction=0.3)


def _no_whole_split(self, split):
    pytest.fail(f"the whole {split} split was read into one frame")


@pytest.fixture(scope="module")
def snapshots(tmp_path_factory):
    root = tmp_path_factory.mktemp("stream-select")
    keyed = make_snapshot(root, rows_per_day=300)
    return {"keyed": keyed, "content": make_snapshot(root, split=NO_KEY, name="content")}


def _row_groups(snapshot_dir, split: str, rows: int) -> None:
    """Rewrite a split file in row groups of ``rows`` rows, as a large snapshot is written."""
    path = load_snapshot(snapshot_dir).root / f"{split}.parquet"
    pd.read_parquet(path).to_parquet(path, index=False, row_group_size=rows)


@pytest.mark.parametrize("name,settings", [("keyed", SplitSettings(key="customer_id", salt="t", val_fraction=0.1,
                                                                     test_fraction=0.3)), ("content", NO_KEY)])
def test_the_split_record_streams_the_train_split(snapshots, name, settings, monkeypatch):
    snapshot = load_snapshot(snapshots[name])
    whole = training_split_record(snapshot, settings)
    _row_groups(snapshots[name], "train", 97)
    monkeypatch.setattr(Snapshot, "frame", _no_whole_split)
    assert training_split_record(snapshot, settings) == whole


def test_the_split_record_still_refuses_settings_that_move_train_rows(snapshots, monkeypatch):
    snapshot = load_snapshot(snapshots["keyed"])
    monkeypatch.setattr(Snapshot, "frame", _no_whole_split)
    other = SplitSettings(key="customer_id", salt="another salt", val_fraction=0.1, test_fraction=0.3)
    with pytest.raises(DataValidationError, match=r"train rows of snapshot .* are not train rows"):
        training_split_record(snapshot, other)


def test_an_export_is_rescored_on_the_val_split_a_row_group_at_a_time(snapshots, tmp_path, monkeypatch):
    model = make_model(snapshots["keyed"], tmp_path / "model.pt", steps=20)
    whole = score_export(model, snapshots["keyed"])
    _row_groups(snapshots["keyed"], "val", 13)
    monkeypatch.setattr(Snapshot, "frame", _no_whole_split)
    streamed = score_export(model, snapshots["keyed"])
    assert streamed.keys() == whole.keys() == {"val_loss", "val_accuracy"}
    for name, value in whole.items():
        # float32 outputs: a matrix product of 13 rows and one of the whole split may round differently in the last
        # bit (the BLAS kernel depends on the row count), so equal to float32's precision, not float64's.
        assert streamed[name] == pytest.approx(value, rel=1e-6, abs=1e-9), name

