"""Per-class behaviour of a class-probability candidate: each class's recall and precision, and the classes it
never predicts.

Accuracy and log loss average over the rows, so a loss that trades the rare classes away (class weights
proportional to frequency instead of its inverse) keeps them high while macro F1 drops from 0.81 to 0.64. The
blessing judges macro F1 against the baselines; here each class is shown on its own, and a class with at least
``MIN_CLASS_ROWS`` test rows that the candidate never predicts is a warning on the blessing (reported, not
blocking: a model may rightly never predict a class it cannot tell apart).
"""

from __future__ import annotations

from typing import Any

import numpy as np

MIN_CLASS_ROWS = 20


def per_class(confusion: np.ndarray, classes: list[str]) -> list[dict[str, Any]]:
    """Per class (rows of ``confusion`` are true classes, columns predicted): test rows, predicted rows, recall,
    precision (None where undefined)."""
    confusion = np.asarray(confusion, dtype=np.int64)
    out = []
    for i, name in enumerate(classes):
        rows, predicted, right = int(confusion[i].sum()), int(confusion[:, i].sum()), int(confusion[i, i])
        out.append({"class": str(name), "test_rows": rows, "predicted_rows": predicted,
                    "recall": right / rows if rows else None, "precision": right / predicted if predicted else None})
    return out


def never_predicted(figures: list[dict[str, Any]], min_rows: int = MIN_CLASS_ROWS) -> list[str]:
    """A warning for each class with at least ``min_rows`` test rows that the candidate predicts for none."""
    return [f"class '{f['class']}' has {f['test_rows']} test rows and the candidate predicts it for none of them "
            f"(recall 0): a loss or class weights that trade the rare classes away, or a class the model cannot "
            f"tell apart; see the per-class recall in the model card"
            for f in figures if f["test_rows"] >= min_rows and f["predicted_rows"] == 0]
