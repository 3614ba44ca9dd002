"""Label leakage for a real-valued label: one feature alone predicts the held-out label almost exactly.

The classification check (``feature_checks.check_label_leakage``) asks whether one feature predicts the label
*as classes*; a continuous label with thousands of distinct values never reaches an accuracy near 1, so a near
copy of it (r = 0.9998) passed. Here a feature predicts the label by the mean train label of its nearest train
value (one distinct value at a time: a category, a count, a measurement), and is judged by the held-out R² of
that prediction, which a copy, a rescaled copy or any one-to-one function of the label makes ~1 while a strong
honest feature with noise (r = 0.97) stays far below. Judged pooled and within each partition, as the
classification check is, on the rows where the column is present.

Input: one frame with the feature columns, the label and the split column (``SPLIT_COLUMN``), and the
partition column for the per-partition judgement; a plain function of pandas and numpy (issue 42 ports it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN, Schema
from ctpipe.components.steps.validate_data.findings import ERROR, Finding

# A column is judged on the rows where it is present, on at least this many held-out and train rows.
MIN_PRESENT_ROWS = 30
# Train and held-out rows judged at most (seeded samples): an R² near 1 is estimated as well from these.
TRAIN_SAMPLE = 200_000
HELD_SAMPLE = 50_000


def nearest_value_predictions(train: pd.Series, y_train: np.ndarray, other: pd.Series, numeric: bool) -> np.ndarray:
    """The label predicted for ``other`` from one feature alone: the mean train label of the same value (a
    category, or a number seen in train), else of the nearest train number; the train mean where none applies."""
    fallback = float(np.mean(y_train)) if len(y_train) else 0.0
    if not numeric:
        means = pd.Series(y_train).groupby(train.astype(str).to_numpy()).mean()
        return other.astype(str).map(means).fillna(fallback).to_numpy(dtype="float64")
    tv = pd.to_numeric(train, errors="coerce").to_numpy(dtype="float64")
    ov = pd.to_numeric(other, errors="coerce").to_numpy(dtype="float64")
    keep = np.isfinite(tv)
    if not keep.any():
        return np.full(len(ov), fallback)
    means = pd.Series(y_train[keep]).groupby(tv[keep]).mean()  # sorted by value: one mean per distinct value
    values, per_value = means.index.to_numpy(dtype="float64"), means.to_numpy(dtype="float64")
    pos = np.clip(np.searchsorted(values, np.nan_to_num(ov)), 0, len(values) - 1)
    left = np.clip(pos - 1, 0, len(values) - 1)
    nearest = np.where(np.abs(ov - values[left]) <= np.abs(values[pos] - ov), left, pos)
    return np.where(np.isfinite(ov), per_value[nearest], fallback)


def held_out_r2(predicted: np.ndarray, truth: np.ndarray) -> float:
    """1 - SSE/SST around the held-out rows' own mean (0 when they are constant)."""
    sst = float(np.sum((truth - truth.mean()) ** 2))
    return 1.0 - float(np.sum((truth - predicted) ** 2)) / sst if sst > 0 else 0.0


def check_continuous_label_leakage(data: pd.DataFrame, schema: Schema, threshold: float) -> list[Finding]:
    """No single feature predicts a real-valued held-out label with R² >= ``threshold`` (one finding a column)."""
    label = pd.to_numeric(data[schema.label], errors="coerce").to_numpy(dtype="float64")
    is_train = (data[SPLIT_COLUMN] == "train").to_numpy()
    train_rows, held_rows = np.flatnonzero(is_train & np.isfinite(label)), np.flatnonzero(~is_train & np.isfinite(label))
    rng = np.random.default_rng(0)
    if len(train_rows) > TRAIN_SAMPLE:
        train_rows = np.sort(rng.choice(train_rows, TRAIN_SAMPLE, replace=False))
    if len(held_rows) > HELD_SAMPLE:
        held_rows = np.sort(rng.choice(held_rows, HELD_SAMPLE, replace=False))
    findings = []
    for col in schema.features:
        train, held = data[col].iloc[train_rows], data[col].iloc[held_rows]
        in_train, in_held = train.notna().to_numpy(), held.notna().to_numpy()
        if in_train.sum() < MIN_PRESENT_ROWS or in_held.sum() < MIN_PRESENT_ROWS:
            continue
        truth = label[held_rows][in_held]
        predicted = nearest_value_predictions(train[in_train], label[train_rows][in_train], held[in_held],
                                              col in schema.numeric)
        r2 = held_out_r2(predicted, truth)
        leaked = r2 >= threshold
        where = ("" if in_held.all() else
                 f" on the {int(in_held.sum())} held-out rows where it is present ({in_held.mean():.0%} of them)")
        findings.append(Finding(
            check="label_leakage", passed=not leaked, severity=ERROR, column=col,
            message=(f"label leakage: feature '{col}' alone predicts the continuous label '{schema.label}' with "
                     f"held-out R² {r2:.4f}{where} (the mean train label of its nearest train value; the label's mean "
                     "alone scores 0). A feature this predictive is usually the label in disguise (computed after "
                     "the outcome, or a unit conversion of it); drop it from data.features" if leaked else
                     f"feature '{col}' alone predicts the continuous label with held-out R² {r2:.4f}{where}"),
            observed=f"R² {r2:.4f}", expected=f"< {threshold}"))
    return findings


def check_continuous_label_leakage_per_partition(data: pd.DataFrame, schema: Schema, threshold: float,
                                                 partition_column: str, *, pooled_leaks: set[str]) -> list[Finding]:
    """The same judged within each partition: a copy on one day of many is diluted in the pooled R² but exact
    within its day. Only leaks are reported, not for the columns the pooled check already found."""
    findings = []
    for partition, rows in data.groupby(partition_column, sort=True, observed=True):
        for found in check_continuous_label_leakage(rows, schema, threshold):
            if found.passed or found.column in pooled_leaks:
                continue
            found.message = (f"label leakage in partition '{partition}' alone (judged within it, not pooled over "
                             f"all partitions): {found.message.removeprefix('label leakage: ')}; check how that "
                             "partition was exported")
            findings.append(found)
    return findings
