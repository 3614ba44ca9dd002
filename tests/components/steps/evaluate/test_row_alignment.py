"""Evaluation pairs row i's target with row i's prediction: a task whose targets or predict do not return one row
per row of the frame, in its order, is refused (the candidate) or not compared against (the champion), never
scored silently wrong."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow.parquet as pq
import pytest

from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.steps.evaluate.scoring import score_batches
from ctpipe.components.tasks.export import load_model_export
from ctpipe.components.tasks.legacy import with_members
from ctpipe.components.tasks.outputs import TaskOutputError
from tests.fixtures.registry import make_model, make_snapshot


def Wrapped(task, **members):  # noqa: N802 - named as the class it replaced
    """The exported model's own task with one member replaced, as a user's buggy task would have it."""
    return with_members(task, **members)


def sorts_by_label(task):
    """A predict that scores the rows sorted by their label (a groupby / sort_values inside a user's predict)."""

    def predict(model, frame, state, reference):
        order = np.argsort(frame[state["label"]].astype(str).to_numpy(), kind="stable")
        return task.scoring.predict(model, frame.iloc[order], state, reference)

    return Wrapped(task, predict=predict)


def drops_last_row(task, part):
    def dropping(*args):
        return {"predict": task.scoring.predict, "targets": task.codec.targets}[part](*args)[:-1]

    return Wrapped(task, **{part: dropping})


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("row-alignment")
    snap = make_snapshot(root)
    test = snap / "test.parquet"
    pq.write_table(pq.read_table(test), test, row_group_size=50)  # several record batches
    return {"snap": load_snapshot(snap), "model": load_model_export(make_model(snap, root / "m.pt", steps=40, seed=0))}


def _score(world, candidate, champion=None):
    snap = world["snap"]
    return score_batches(snap.batches("test"), candidate=candidate, reference=world["model"].state,
                         champion=champion, champion_version="3", slices=[], schema=snap.schema)


def test_a_correct_task_scores_and_its_champion_too(world):
    scored = _score(world, world["model"], champion=world["model"])
    assert scored.champion_error is None and len(scored.candidate) == len(scored.targets) == world["snap"].rows("test")


def test_a_candidate_whose_predict_reorders_rows_is_refused_naming_predict(world):
    model = world["model"]
    with pytest.raises(TaskOutputError, match="predict is not row-aligned"):
        _score(world, dataclasses.replace(model, task=sorts_by_label(model.task)))


@pytest.mark.parametrize("part", ["predict", "targets"])
def test_a_candidate_whose_part_drops_a_row_is_refused_naming_the_part(world, part):
    model = world["model"]
    with pytest.raises(TaskOutputError, match=rf"{part} returned 49 row\(s\) for a frame of 50 row\(s\)"):
        _score(world, dataclasses.replace(model, task=drops_last_row(model.task, part)))


def test_a_champion_whose_predict_reorders_rows_is_not_compared_against(world):
    model = world["model"]
    scored = _score(world, model, champion=dataclasses.replace(model, task=sorts_by_label(model.task)))
    assert scored.champion is None
    assert "champion version 3 cannot score" in scored.champion_error
    assert "predict is not row-aligned" in scored.champion_error
