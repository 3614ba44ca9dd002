"""Evaluation streams the test split: the same per-row values, metrics and verdicts as the whole frame."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctpipe.components.lib.data.snapshot import Snapshot, load_snapshot
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.evaluate.leakage import champion_training_overlap
from ctpipe.components.steps.evaluate.scoring import score_batches
from ctpipe.components.tasks.export import load_model_export
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("streamed-eval")
    snap = make_snapshot(root)
    chunked = root / "chunked"
    shutil.copytree(snap, chunked)
    test = chunked / "test.parquet"
    pq.write_table(pq.read_table(test), test, row_group_size=37)  # many record batches
    return {"snap": snap, "chunked": chunked, "model": make_model(snap, root / "m.pt", steps=40, seed=0),
            "champion": make_model(snap, root / "c.pt", steps=5, seed=2)}


def test_streamed_scores_equal_the_whole_frames(world):
    snap = load_snapshot(world["chunked"])
    assert pq.ParquetFile(world["chunked"] / "test.parquet").num_row_groups > 5
    model, champion = load_model_export(world["model"]), load_model_export(world["champion"])
    frame = snap.frame("test")
    scored = score_batches(snap.batches("test"), candidate=model, reference=model.state, champion=champion,
                           champion_version="1", slices=["region", "tenure_months"], schema=snap.schema)
    task = model.task
    whole_y = task.codec.targets(frame, model.state)
    whole_p = task.scoring.predict(model.model, frame, model.state, model.state)
    assert scored.rows == len(frame)
    assert np.array_equal(scored.targets, whole_y)
    np.testing.assert_allclose(scored.candidate, whole_p, rtol=0, atol=1e-6)
    np.testing.assert_allclose(scored.champion, task.scoring.predict(champion.model, frame, champion.state, model.state),
                               rtol=0, atol=1e-6)
    assert task.scoring.compute_metrics(scored.targets, scored.candidate) == pytest.approx(task.scoring.compute_metrics(whole_y, whole_p))
    assert scored.slice_columns.equals(frame[["region", "tenure_months"]].reset_index(drop=True))


def test_the_streamed_overlap_count_is_the_whole_frames(world):
    snap = load_snapshot(world["chunked"])
    record = SplitSettings(key="customer_id", salt="another", val_fraction=0.1, test_fraction=0.3).to_dict()
    champion = load_model_export(world["champion"])
    champion.metadata = {**champion.metadata, "split": record}
    scored = score_batches(snap.batches("test"), candidate=champion, reference=champion.state, champion=champion,
                           champion_version="7", slices=[], schema=snap.schema)
    whole = champion_training_overlap(record, snap.frame("test"), snap.schema, version="7")
    assert not whole.ok and whole.overlap_rows > 0
    assert scored.overlap == whole


def test_evaluation_never_reads_the_test_frame_and_judges_as_on_one_batch(world, tmp_path, monkeypatch):
    original = Snapshot.frame

    def no_test_frame(self, split):
        assert split != "test", "the evaluation read the whole test split into one frame"
        return original(self, split)

    monkeypatch.setattr(Snapshot, "frame", no_test_frame)
    config = fast_config()
    config.evaluate.slices = ["region"]
    verdicts = []
    for name in ("snap", "chunked"):  # one row group, then many
        out = tmp_path / name
        uri = local_tracking_uri(out)
        result = evaluate_candidate(str(world["model"]), str(world[name]), config, tracking_uri=uri,
                                    mlflow_run_id=make_run(uri, config), blessing_path=str(out / "b.json"),
                                    card_path=str(out / "card.md"))
        blessing = json.loads((out / "b.json").read_text())
        verdicts.append((result.blessed, result.test_rows, blessing["checks"], blessing["slices"]))
    a, b = verdicts
    assert a[:2] == b[:2] and [c["passed"] for c in a[2]] == [c["passed"] for c in b[2]]
    assert [s["rows"] for s in a[3]] == [s["rows"] for s in b[3]]
    for x, y in zip(a[3], b[3], strict=True):
        assert x["candidate"] == pytest.approx(y["candidate"])


@pytest.mark.parametrize("error", [IndexError("index 7 is out of bounds for axis 1 with size 4"),
                                   AttributeError("'NoneType' object has no attribute 'numeric'")],
                         ids=["IndexError", "AttributeError"])
def test_a_champion_that_fails_to_score_with_any_error_is_reported_not_a_crash(world, error):
    """Today's task code scoring an old champion can fail in ways no list of exception types foresees (a
    changed encoder indexing past the champion's columns, a state key it no longer has). Before, anything but
    DataValidationError/ValueError/KeyError/TypeError/RuntimeError crashed the evaluate step, and so every
    later run with that champion; now the champion is reported as not scorable and nothing is blessed
    against it, as for the other errors."""
    from dataclasses import replace

    snap = load_snapshot(world["snap"])
    model, champion = load_model_export(world["model"]), load_model_export(world["champion"])

    from ctpipe.components.tasks.legacy import with_members

    def predict(*args, **kwargs):
        raise error

    broken = replace(champion, task=with_members(champion.task, predict=predict))
    scored = score_batches(snap.batches("test"), candidate=model, reference=model.state, champion=broken,
                           champion_version="3", slices=[], schema=snap.schema)
    assert scored.champion is None
    assert scored.champion_error.startswith("champion version 3 cannot score the current test split:")
    assert type(error).__name__ in scored.champion_error and str(error) in scored.champion_error
