"""Label leakage of one class: a feature that reveals one class almost perfectly and says nothing of the others.

The classification check (``feature_checks.check_label_leakage``) asks whether one feature predicts *every*
class; a feature computed after the outcome of one class (a cancellation date that only churned customers
have, a refund flag) separates that class with one-vs-rest AUC 0.99+ while the other classes stay near chance,
so its accuracy is far from 1 and it passed. Here each feature is scored for each class by the class's share
among the train rows of the same value (a category, a number with few values) or of the nearest train values
(many numbers: the ``WINDOW`` train rows either side in sorted order), and judged by that score's held-out
one-vs-rest AUC. A class is judged with at least ``MIN_CLASS_ROWS`` held-out rows of it and of the rest; a
leak is an AUC at or above the leakage threshold whose one-sided 99.9 % lower bound (Hanley & McNeil's
standard error) is above ``AUC_FLOOR``, so a strong honest feature on a few rows of a rare class, whose AUC
reaches 0.99 by chance, is not called a leak.

Input: one frame with the feature columns, the label and the split column; the columns the whole-label check
already found leaking are left out (``already``). A plain function of pandas and numpy (issue 42 ports it).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN, Schema
from ctpipe.components.steps.validate_data.findings import ERROR, Finding

MIN_PRESENT_ROWS = 30
MIN_CLASS_ROWS = 30
# A numeric column with more distinct train values than this is scored by its nearest train rows, not per value.
FEW_VALUES = 50
WINDOW = 10
# An AUC is estimated from tens of rows of a class: a leak's estimate may fall this far under the threshold...
AUC_SLACK = 0.005
# ...and its 99.9 % lower bound must lie above this (a bound at 0.99 itself would need thousands of rows).
AUC_FLOOR = 0.95
# A feature that also tells the other classes apart (AUC at or above this among the rows of the rest) is an honest
# strong feature (iris' petal length separates setosa perfectly and the other two well), not one outcome's record.
OTHERS_INFORMATIVE = 0.8
MIN_OTHER_ROWS = 10
Z_LOWER = NormalDist().inv_cdf(0.999)
TRAIN_SAMPLE = 200_000
HELD_SAMPLE = 50_000


def class_share_scores(train: pd.Series, is_class: np.ndarray, other: pd.Series, numeric: bool) -> np.ndarray:
    """For each value of ``other``: the class's share among train rows of the same value, or (a numeric column
    with many values) among the ``2 * WINDOW`` train rows nearest to it in sorted order."""
    prior = float(is_class.mean()) if len(is_class) else 0.0
    if not numeric or train.nunique(dropna=True) <= FEW_VALUES:
        keys_train, keys_other = train.astype(str).to_numpy(), other.astype(str)
        shares = pd.Series(is_class.astype("float64")).groupby(keys_train).mean()
        return keys_other.map(shares).fillna(prior).to_numpy(dtype="float64")
    tv = pd.to_numeric(train, errors="coerce").to_numpy(dtype="float64")
    ov = pd.to_numeric(other, errors="coerce").to_numpy(dtype="float64")
    order = np.argsort(tv, kind="stable")
    sv, sy = tv[order], is_class[order].astype("float64")
    cum = np.concatenate([[0.0], np.cumsum(sy)])
    pos = np.searchsorted(sv, np.nan_to_num(ov))
    lo, hi = np.clip(pos - WINDOW, 0, len(sv)), np.clip(pos + WINDOW, 0, len(sv))
    shares = (cum[hi] - cum[lo]) / np.maximum(hi - lo, 1)
    return np.where(np.isfinite(ov), shares, prior)


def auc_with_lower_bound(scores: np.ndarray, positive: np.ndarray) -> tuple[float, float]:
    """One-vs-rest AUC (ties count half, Mann-Whitney) and its one-sided 99.9 % lower bound (Hanley-McNeil)."""
    n1, n2 = int(positive.sum()), int((~positive).sum())
    ranks = pd.Series(scores).rank(method="average").to_numpy()
    auc = (ranks[positive].sum() - n1 * (n1 + 1) / 2) / (n1 * n2)
    q1, q2 = auc / (2 - auc), 2 * auc**2 / (1 + auc)
    var = (auc * (1 - auc) + (n1 - 1) * (q1 - auc**2) + (n2 - 1) * (q2 - auc**2)) / (n1 * n2)
    return float(auc), float(auc - Z_LOWER * np.sqrt(max(var, 0.0)))


def auc_among_the_rest(train: pd.Series, y_train: np.ndarray, held: pd.Series, y_held: np.ndarray, cls: str,
                       numeric: bool) -> float | None:
    """How well the feature tells the other classes apart among the rows not of ``cls``: the highest one-vs-rest AUC
    over those classes (each with ``MIN_OTHER_ROWS`` held-out rows of it and of the rest); None when none has."""
    keep_train, keep_held = y_train != cls, y_held != cls
    train, y_train, held, y_held = train[keep_train], y_train[keep_train], held[keep_held], y_held[keep_held]
    aucs = []
    for other in sorted(set(y_held)):
        positive = y_held == other
        if min(positive.sum(), (~positive).sum()) < MIN_OTHER_ROWS:
            continue
        aucs.append(auc_with_lower_bound(class_share_scores(train, y_train == other, held, numeric), positive)[0])
    return max(aucs) if aucs else None


def check_one_class_leakage(data: pd.DataFrame, schema: Schema, threshold: float, *,
                            already: set[str] = frozenset()) -> list[Finding]:
    """No single feature separates one class from the rest with a held-out AUC >= ``threshold`` − ``AUC_SLACK``
    whose 99.9 % lower bound is above ``AUC_FLOOR``, while telling the other classes apart no better than
    ``OTHERS_INFORMATIVE`` (a leak reveals one outcome; the others stay near chance). Only for three classes or more:
    with two, one class against the rest is the whole label, which ``feature_checks.check_label_leakage`` judges
    (an honest feature reaches AUC 0.99 on a binary label: scikit-learn's breast cancer table).

    One finding per leaking (column, class); one passed finding naming the highest AUC when none leaks."""
    labels = data[schema.label].astype(str).to_numpy()
    is_train = (data[SPLIT_COLUMN] == "train").to_numpy() & data[schema.label].notna().to_numpy()
    is_held = ~(data[SPLIT_COLUMN] == "train").to_numpy() & data[schema.label].notna().to_numpy()
    rng = np.random.default_rng(0)
    train_rows, held_rows = np.flatnonzero(is_train), np.flatnonzero(is_held)
    if len(train_rows) > TRAIN_SAMPLE:
        train_rows = np.sort(rng.choice(train_rows, TRAIN_SAMPLE, replace=False))
    if len(held_rows) > HELD_SAMPLE:
        held_rows = np.sort(rng.choice(held_rows, HELD_SAMPLE, replace=False))
    classes = sorted(set(labels[held_rows]))
    if len(classes) < 3:
        return [Finding(check="label_leakage_one_class", passed=True, severity=ERROR, not_applicable=True,
                        message=f"not judged: {len(classes)} class(es) held out; with two, one class against the rest "
                                "is the whole label (label_leakage judges it)")]
    bar = threshold - AUC_SLACK
    findings: list[Finding] = []
    best: tuple[float, str, str] = (0.0, "", "")
    for col in schema.features:
        if col in already:
            continue
        train, held = data[col].iloc[train_rows], data[col].iloc[held_rows]
        in_train, in_held = train.notna().to_numpy(), held.notna().to_numpy()
        if in_train.sum() < MIN_PRESENT_ROWS or in_held.sum() < MIN_PRESENT_ROWS:
            continue
        y_train, y_held = labels[train_rows][in_train], labels[held_rows][in_held]
        for cls in classes:
            positive = y_held == cls
            if min(positive.sum(), (~positive).sum()) < MIN_CLASS_ROWS:
                continue
            scores = class_share_scores(train[in_train], y_train == cls, held[in_held], col in schema.numeric)
            auc, lower = auc_with_lower_bound(scores, positive)
            best = max(best, (auc, col, cls))
            if auc >= bar and lower > AUC_FLOOR:
                rest = auc_among_the_rest(train[in_train], y_train, held[in_held], y_held, cls, col in schema.numeric)
                if rest is not None and rest >= OTHERS_INFORMATIVE:
                    continue
                findings.append(Finding(
                    check="label_leakage_one_class", passed=False, severity=ERROR, column=col,
                    message=(f"label leakage of one class: feature '{col}' alone separates class '{cls}' of "
                             f"'{schema.label}' from the other classes with held-out one-vs-rest AUC {auc:.4f} "
                             f"(99.9% lower bound {lower:.4f}, over {int(positive.sum())} held-out rows of '{cls}' "
                             f"and {int((~positive).sum())} of the rest), though it does not predict the whole label"
                             + (f" (the other classes among themselves: AUC {rest:.2f})" if rest is not None else "")
                             + ". "
                             f"A feature that reveals one outcome is usually recorded after it (a date or flag only "
                             f"'{cls}' rows get); drop it from data.features"),
                    observed=f"AUC {auc:.4f} (99.9% lower bound {lower:.4f})", expected=f"< {bar:g}, or a lower bound <= {AUC_FLOOR}"))
    if not findings:
        auc, col, cls = best
        findings.append(Finding(
            check="label_leakage_one_class", passed=True, severity=ERROR,
            message=(f"no feature separates one class with a held-out AUC >= {bar:g} shown above {AUC_FLOOR}" +
                     (f" (highest: '{col}' for class '{cls}', {auc:.3f})" if col else "")),
            observed=f"highest AUC {auc:.3f}", expected=f"< {bar:g}, or a lower bound <= {AUC_FLOOR}"))
    return findings


def check_one_class_leakage_per_partition(data: pd.DataFrame, schema: Schema, threshold: float,
                                          partition_column: str, *, already: set[str]) -> list[Finding]:
    """The same within each partition (a leak on one day of many is diluted pooled); only leaks are reported."""
    findings = []
    for partition, rows in data.groupby(partition_column, sort=True, observed=True):
        for found in check_one_class_leakage(rows, schema, threshold, already=already):
            if found.passed:
                continue
            found.message = (f"in partition '{partition}' alone (judged within it, not pooled over all partitions): "
                             f"{found.message}; check how that partition was exported")
            findings.append(found)
    return findings
