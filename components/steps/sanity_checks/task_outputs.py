"""The task-outputs check of the sanity gate: the task's evaluation and serving parts work on the first batch.

Evaluation (``targets``, ``predict``, ``compute_metrics``) and the registered pyfunc (``serve``) run only
after training; a part that returns the wrong number of rows or rows in another order, or a
``compute_metrics`` that cannot take ``targets`` and ``predict``'s output, would fail there, after the whole
training, or score silently wrong. Here they run on the first batch's raw rows with a fresh model, before
training (``components/tasks/outputs.py``).
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.tasks.outputs import (
    PROBE_ROWS,
    TaskOutputError,
    check_class_predictions,
    check_served_order,
    check_served_rows,
    checked_predict,
    checked_targets,
)
from ctpipe.components.tasks.protocol import CheckResult

RULE = ("targets, predict and serve: one row per row, in order; predict: [rows, classes] with class_names; "
        "compute_metrics takes them")


def check_task_outputs(task: Any, model: Any, raw: Any, state: dict[str, Any], features: list[str]) -> CheckResult:
    """``task``'s targets, predict (re-predicted in reverse order), compute_metrics and serve (on ``features``
    only, as the pyfunc gets them) on the first ``PROBE_ROWS`` raw rows with a fresh ``model``."""
    import torch

    rows = raw.iloc[:PROBE_ROWS]
    part = "targets"
    model.eval()
    try:
        with torch.no_grad():
            targets = checked_targets(task, rows, state)
            part = "predict"
            predictions = checked_predict(task, model, rows, state, state, probe=True)
            check_class_predictions(task, predictions, list(task.scoring.class_names(state) or []))
            part = "compute_metrics"
            metrics = dict(task.scoring.compute_metrics(targets, predictions))
            part = "serve"
            served = task.serving.serve(model, rows[features], state)
            check_served_rows(task, served, len(rows))
            check_served_order(task, served, task.serving.serve(model, rows[features].iloc[::-1], state))
    except TaskOutputError as err:
        return CheckResult("task_outputs", False, None, RULE, f"on {len(rows)} first-batch rows: {err}")
    except Exception as err:  # the user's code: any error is theirs to see, with the part that raised it
        return CheckResult("task_outputs", False, None, RULE,
                           f"on {len(rows)} first-batch rows: task '{task.name}': {part} raised "
                           f"{type(err).__name__}: {err}")
    return CheckResult("task_outputs", True, None, RULE,
                       f"on {len(rows)} first-batch rows: {len(predictions)} row-aligned predictions (also in reverse "
                       f"order), metrics {', '.join(sorted(metrics))}, {len(rows)} served rows (also in reverse order)")
