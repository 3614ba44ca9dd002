"""The registered pyfunc's input example: the first test rows, read without loading a whole split."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow.models import Model

from components.data.snapshot import Snapshot, load_snapshot
from components.registration.register import build_pyfunc_model
from tests.fixtures.registry import make_model, make_snapshot


def _no_whole_split(self, split):
    pytest.fail(f"the {split} split was read whole for a five-row input example")


@pytest.fixture
def snapshot_and_model(tmp_path):
    snapshot_dir = make_snapshot(tmp_path, rows_per_day=200)
    return load_snapshot(snapshot_dir), make_model(snapshot_dir, tmp_path / "model.pt")


def _example(target) -> pd.DataFrame:
    return Model.load(str(target)).load_input_example(str(target))


def test_the_input_example_is_the_first_test_rows_read_without_the_whole_split(snapshot_and_model, tmp_path,
                                                                              monkeypatch):
    snapshot, model = snapshot_and_model
    expected = snapshot.frame("test")[snapshot.schema.all_features].head(5).reset_index(drop=True)
    monkeypatch.setattr(Snapshot, "frame", _no_whole_split)
    example = _example(build_pyfunc_model(model, snapshot, tmp_path / "pyfunc"))
    pd.testing.assert_frame_equal(example, expected, check_dtype=False)


def test_an_empty_test_split_takes_the_example_from_train(snapshot_and_model, tmp_path, monkeypatch):
    snapshot, model = snapshot_and_model
    train = snapshot.frame("train")
    train.iloc[:0].to_parquet(snapshot.root / "test.parquet", index=False)
    monkeypatch.setattr(Snapshot, "frame", _no_whole_split)
    example = _example(build_pyfunc_model(model, snapshot, tmp_path / "pyfunc"))
    expected = train[snapshot.schema.all_features].head(5).reset_index(drop=True)
    pd.testing.assert_frame_equal(example, expected, check_dtype=False)
