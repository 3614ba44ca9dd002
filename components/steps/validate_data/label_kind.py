"""Does the label look like what the task expects: classes, or a real number? Judged from the data, early.

A float label with many distinct values given to a classification task would become hundreds of classes
(and fail later on "values to be in set", or train a useless classifier); a text label given to a
regression task cannot be learned at all. Both stop validation in its structure checks, before the suite
runs, naming the task that fits. An integer label with few values given to regression only warns: counts
and ratings are real regressions too.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.splits import canonical_text
from ctpipe.components.steps.validate_data.findings import ERROR, WARNING, Finding

# A label with fewer distinct values than this is never called continuous (a 10-class digit, a 5-star rating).
MIN_CONTINUOUS_VALUES = 20
# A float label is continuous when its distinct values are at least this share of the rows (an integral float
# label with 214 values on 442 rows is a measured quantity, not 214 classes)...
CONTINUOUS_SHARE = 0.05
# ...and any numeric label when they are at least this share (few rows share a value: not classes).
CONTINUOUS_SHARE_ANY = 0.5
# Regression on an integer label with at most this many values warns that it may be classes.
FEW_VALUES = 10


def looks_continuous(labels: pd.Series) -> bool:
    """True for a numeric label whose values are too many and too spread to be classes."""
    values = labels.dropna()
    if len(values) == 0 or pd.api.types.is_bool_dtype(values) or not pd.api.types.is_numeric_dtype(values):
        return False
    distinct = values.nunique()
    if distinct < MIN_CONTINUOUS_VALUES:
        return False
    share = distinct / len(values)
    as_float = values.to_numpy(dtype="float64")
    fractional = bool(np.any(np.isfinite(as_float) & (as_float != np.round(as_float))))
    is_float = pd.api.types.is_float_dtype(values)
    return fractional or (is_float and share >= CONTINUOUS_SHARE) or share >= CONTINUOUS_SHARE_ANY


def check_label_kind(labels: pd.Series, label_kind: str, task_name: str) -> list[Finding]:
    """The label against the task's ``label_kind``: an error when it cannot be that, a warning when unlikely."""
    column = str(labels.name)
    values = labels.dropna()
    distinct = int(values.nunique())
    if label_kind == "classes":
        if not looks_continuous(labels):
            return []
        return [Finding(
            check="label_kind", passed=False, severity=ERROR, column=column, source="structure",
            message=(f"label column '{column}' looks continuous ({values.dtype} with {distinct} distinct values on "
                     f"{len(values)} rows), but task '{task_name}' treats each distinct value as a class. For a "
                     f"real-valued label use regression: --set task.name=tabular_regression (or a task whose "
                     f"label_kind is 'continuous'); if these really are classes, make the column text or integers"),
            observed=f"{distinct} distinct {values.dtype} values", expected="classes (text, or few integer values)")]
    if label_kind != "continuous":
        return []
    numbers = pd.to_numeric(values, errors="coerce")
    if pd.api.types.is_bool_dtype(values) or numbers.isna().any():
        bad = sorted({str(v) for v in values[numbers.isna()].head(5)}) if numbers.isna().any() else ["True/False"]
        return [Finding(
            check="label_kind", passed=False, severity=ERROR, column=column, source="structure",
            message=(f"label column '{column}' of task '{task_name}' must be a number on every row, but it holds "
                     f"{bad}: a regression needs a numeric label. For classes use --set "
                     f"task.name=tabular_classification"),
            observed=f"{values.dtype} values such as {bad[0]!r}", expected="numbers")]
    integral = bool(np.all(numbers.to_numpy(dtype="float64") == np.round(numbers.to_numpy(dtype="float64"))))
    if integral and distinct <= FEW_VALUES:
        classes = ", ".join(sorted(canonical_text(values).unique())[:FEW_VALUES])
        return [Finding(
            check="label_kind", passed=False, severity=WARNING, column=column, source="structure",
            message=(f"label column '{column}' has only {distinct} integer values ({classes}): task '{task_name}' "
                     f"predicts it as a real number; if they are classes use --set task.name=tabular_classification"),
            observed=f"{distinct} integer values", expected="a continuous label")]
    return []
