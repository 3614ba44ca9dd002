"""The registered pyfunc's input example: the first test rows, read without loading a whole split."""

from __future__ import annotations

import pandas as pd
import pytest
from mlflow.models import Model

from ctpipe.components.lib.data.snapshot import Snapshot, load_snapshot
from ctpipe.components.steps.register.model_artifacts import build_pyfunc_model
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


def test_the_registered_pyfunc_answers_on_the_callers_index(snapshot_and_model, tmp_path):
    # Before: the output had a fresh 0..n-1 index, so `frame["p"] = model.predict(frame)[cls]` on a filtered
    # frame (index 0, 4, 5, 21, ...) silently put NaN or another row's probability on most rows.
    import mlflow.pyfunc

    snapshot, model = snapshot_and_model
    pyfunc = mlflow.pyfunc.load_model(str(build_pyfunc_model(model, snapshot, tmp_path / "pyfunc")))
    test = snapshot.frame("test")[snapshot.schema.all_features]
    whole = pyfunc.predict(test)
    some = test[test["region"] == test["region"].iloc[0]].iloc[::-1]  # filtered and reordered
    served = pyfunc.predict(some)
    assert list(served.index) == list(some.index)
    pd.testing.assert_frame_equal(served, whole.loc[some.index], check_exact=False, rtol=1e-5)


def _with_recorded_task_code(path, **changes):
    import torch

    payload = torch.load(path, map_location="cpu", weights_only=True)
    payload["task_code"] = {**payload["task_code"], **changes}
    torch.save(payload, path)
    return path


def test_the_pyfunc_warns_at_load_when_it_is_served_with_other_task_code(snapshot_and_model, tmp_path, caplog):
    # Before: a model trained with one version of its task's code and served with another (the serving image's
    # ctpipe) loaded silently, though its preprocessing and outputs may no longer be what its blessing measured.
    import mlflow.pyfunc

    snapshot, model = snapshot_and_model
    _with_recorded_task_code(model, source_sha256="0" * 64)
    target = build_pyfunc_model(model, snapshot, tmp_path / "pyfunc")
    with caplog.at_level("WARNING", logger="ctpipe.components.steps.register.pyfunc_model"):
        mlflow.pyfunc.load_model(str(target))
    warned = [r.getMessage() for r in caplog.records if r.name == "ctpipe.components.steps.register.pyfunc_model"]
    assert len(warned) == 1, warned
    assert "trained with task code" in warned[0] and "sha256 000000000000" in warned[0]
    assert "served here with" in warned[0]


def test_the_pyfunc_loads_quietly_with_the_task_code_it_was_trained_with(snapshot_and_model, tmp_path, caplog):
    import mlflow.pyfunc

    snapshot, model = snapshot_and_model
    target = build_pyfunc_model(model, snapshot, tmp_path / "pyfunc")
    with caplog.at_level("WARNING", logger="ctpipe.components.steps.register.pyfunc_model"):
        mlflow.pyfunc.load_model(str(target))
    assert [r for r in caplog.records if r.name == "ctpipe.components.steps.register.pyfunc_model"] == []
