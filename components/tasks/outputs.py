"""Checks that a task's per-row outputs (``targets``, ``predict``, ``serve``) give one row per input row, in order.

Evaluation pairs row i's target with row i's prediction (the paired bootstrap resamples rows), and the
registered pyfunc's caller pairs its output rows with the rows it sent. A ``predict`` that sorts, groups
or drops rows would therefore be scored silently wrong (a good model measured as bad, or the reverse),
so the sanity gate (before training), evaluation (candidate and champion) and registration hold the
task's outputs to this, naming the part that broke it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.errors import UserError

# Rows re-predicted on their own, in reverse order, to check that ``predict`` is row-aligned.
PROBE_ROWS = 16
# Re-predicting a subset runs the model on a different batch shape: kernels may round differently.
RTOL, ATOL = 1e-4, 1e-6
ROW_RULE = ("one row per row of the frame, row i's at position i of the first axis, whatever the order and "
            "the other rows of the frame (no sorting, grouping, dropping or batch statistics)")


class TaskOutputError(UserError, ValueError):
    """A task's per-row output does not line up with the rows it was given; the message names the part."""


def output_rows(values: Any) -> int | None:
    """Rows of an output: its length along the first axis (None for a scalar)."""
    if isinstance(values, pd.DataFrame | pd.Series):
        return len(values)
    shape = np.shape(values)
    return int(shape[0]) if shape else None


def check_rows(task: Any, part: str, values: Any, rows: int) -> None:
    """TaskOutputError unless ``values`` (what ``task.<part>`` returned for ``rows`` rows) has ``rows`` rows."""
    found = output_rows(values)
    if found != rows:
        raise TaskOutputError(
            f"task '{task.name}': {part} returned {'a scalar' if found is None else f'{found} row(s)'} for a frame "
            f"of {rows} row(s); it must return {ROW_RULE}"
        )


def checked_targets(task: Any, frame: pd.DataFrame, state: dict[str, Any]) -> np.ndarray:
    """``task.codec.targets`` for the frame's rows, checked to hold one row per row."""
    targets = np.asarray(task.codec.targets(frame, state))
    check_rows(task, "targets", targets, len(frame))
    return targets


def checked_predict(task: Any, model: Any, frame: pd.DataFrame, state: dict[str, Any], reference: dict[str, Any],
                    *, probe: bool = False) -> np.ndarray:
    """``task.scoring.predict`` for the frame's rows, checked to hold one row per row; with ``probe``, also that the
    first ``PROBE_ROWS`` rows predicted on their own, in reverse order, get the same predictions."""
    predictions = np.asarray(task.scoring.predict(model, frame, state, reference))
    check_rows(task, "predict", predictions, len(frame))
    if probe and len(frame) > 1:
        picked = np.arange(min(len(frame), PROBE_ROWS))[::-1]
        again = np.asarray(task.scoring.predict(model, frame.iloc[picked], state, reference))
        check_rows(task, "predict", again, len(picked))
        if not _same(again, predictions[picked]):
            raise TaskOutputError(
                f"task '{task.name}': predict is not row-aligned: rows 0-{len(picked) - 1} of a frame, predicted on "
                "their own in reverse order, do not get the predictions they got in the whole frame. predict must "
                f"return {ROW_RULE}, and be deterministic (the model in eval mode)"
            )
    return predictions


def check_class_predictions(task: Any, predictions: np.ndarray, classes: list[str]) -> None:
    """TaskOutputError unless ``predict``'s output is [rows, classes] when the task names ``classes``
    (``class_names``: the confusion matrix and the ROC read the predictions as class probabilities)."""
    if classes and (predictions.ndim != 2 or predictions.shape[1] != len(classes)):
        raise TaskOutputError(
            f"task '{task.name}': class_names gives {len(classes)} classes, so predict must return class "
            f"probabilities [rows, {len(classes)}], but it returned shape {list(predictions.shape)}; return "
            "probabilities, or return None from class_names when predict returns something else"
        )


def check_served_rows(task: Any, served: Any, rows: int) -> None:
    """TaskOutputError unless ``task.serving.serve``'s output (what the registered pyfunc returns) has ``rows`` rows."""
    check_rows(task, "serve", served, rows)


def check_served_order(task: Any, served: pd.DataFrame, served_reversed: pd.DataFrame) -> None:
    """TaskOutputError unless ``served_reversed`` (``task.serving.serve`` of the same rows in reverse order) is ``served``
    reversed: the pyfunc labels output row i with input row i's index, so a serve that sorts or groups would
    otherwise hand each caller's row another row's output."""
    ordered, again = pd.DataFrame(served).iloc[::-1], pd.DataFrame(served_reversed)
    same = list(ordered.columns) == list(again.columns) and all(
        _same(np.asarray(ordered[c]), np.asarray(again[c])) if pd.api.types.is_numeric_dtype(ordered[c])
        else ordered[c].reset_index(drop=True).equals(again[c].reset_index(drop=True))
        for c in ordered.columns
    )
    if not same:
        raise TaskOutputError(
            f"task '{task.name}': serve is not row-aligned: rows served in reverse order do not get the outputs "
            f"they got in order. serve must return {ROW_RULE}, and be deterministic (the model in eval mode)"
        )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if np.issubdtype(a.dtype, np.number) and np.issubdtype(b.dtype, np.number):
        return bool(np.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))
    return bool(np.array_equal(a, b))
