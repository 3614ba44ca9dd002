"""Streams a snapshot's test split through the candidate and the champion, one row group at a time.

The evaluation step never holds the split's frame: each record batch is scored and dropped. What is
kept is what the paired bootstrap and the slices need per row: the target and each model's prediction
(for the tabular task 8 bytes of label plus 8 bytes a class a model: 72 bytes a row with four classes
and a champion), the configured slice columns (quartile bins need a numeric column whole) and the
champion-overlap count (``leakage.OverlapCounter``, exact: a row's split depends on that row alone).
Predictions are per row (``Task.predict``), so concatenating the batches' gives the whole split's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.steps.evaluate.leakage import OverlapCheck, OverlapCounter
from ctpipe.components.tasks.outputs import checked_predict, checked_targets


@dataclass
class ScoredSplit:
    """Per-row targets and predictions of a streamed split, and what was decided while streaming."""

    rows: int
    targets: np.ndarray
    candidate: np.ndarray
    champion: np.ndarray | None  # None: no champion, or it could not score a batch (``champion_error``)
    slice_columns: pd.DataFrame
    linear: np.ndarray | None = None  # the linear baseline's predictions (``linear_baseline.py``), when fitted
    champion_error: str | None = None
    overlap: OverlapCheck | None = None


def score_batches(
    batches, *, candidate: Any, reference: dict[str, Any], champion: Any = None, champion_version: str | None = None,
    slices: list[str], schema: Any, linear: Any = None,
) -> ScoredSplit:
    """Score every record batch of ``batches`` (DataFrames) with ``candidate`` and, if given, ``champion``
    (``ExportedModel``s) and the ``linear`` baseline's stand-in model (read through the candidate's task and
    state), against the candidate's ``reference`` state."""
    targets, cand, champ, kept, lin = [], [], [], [], []
    counter: OverlapCounter | None = None
    champion_error: str | None = None
    rows = 0
    for frame in batches:
        if rows == 0:
            missing = [c for c in slices if c not in frame.columns]
            if missing:
                raise UserError(
                    f"evaluate.slices names column '{missing[0]}', which is not in the test split; columns are: "
                    f"{', '.join(map(str, frame.columns))}. Fix evaluate.slices."
                )
            if champion is not None:
                counter = OverlapCounter(champion.metadata.get("split"), list(frame.columns), schema,
                                         version=str(champion_version))
        first = rows == 0
        rows += len(frame)
        targets.append(checked_targets(candidate.task, frame, reference))
        cand.append(score_export(candidate, frame, reference, probe=first))
        if linear is not None:
            lin.append(checked_predict(candidate.task, linear, frame, candidate.state, reference))
        if champion is not None and champion_error is None:
            try:
                champ.append(score_export(champion, frame, reference, probe=first))
            except (DataValidationError, ValueError, KeyError, TypeError, RuntimeError) as err:
                champion_error = f"champion version {champion_version} cannot score the current test split: {err}"
            except Exception as err:  # noqa: BLE001 - an old model under today's task code can fail any way
                # Never a crash: the step would fail again on every later run with this champion.
                champion_error = (f"champion version {champion_version} cannot score the current test split: "
                                  f"{type(err).__name__}: {err}")
        if counter is not None:
            counter.add(frame)
        kept.append(frame[slices].reset_index(drop=True))
    if rows == 0:
        raise DataValidationError("the test split has no rows")
    return ScoredSplit(
        rows=rows,
        targets=np.concatenate(targets),
        candidate=np.concatenate(cand),
        champion=np.concatenate(champ) if champion is not None and champion_error is None else None,
        slice_columns=pd.concat(kept, ignore_index=True),
        linear=np.concatenate(lin) if linear is not None else None,
        champion_error=champion_error,
        overlap=counter.verdict() if counter is not None and champion_error is None else None,
    )


def score_export(model: Any, frame: pd.DataFrame, reference: dict[str, Any], *, probe: bool = False) -> np.ndarray:
    """An ``ExportedModel``'s predictions for every row (its own task and statistics), against ``reference``:
    one per row, in the frame's order (``TaskOutputError`` otherwise; ``probe``: re-predict a few rows alone)."""
    return checked_predict(model.task, model.model, frame, model.state, reference, probe=probe)
