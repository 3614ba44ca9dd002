"""Checks of what the features hold, in plain pandas: label leakage, constant and id-like columns, duplicates, skew."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN, Schema
from ctpipe.components.lib.data.stream_stats import category_counts, category_key
from ctpipe.components.steps.validate_data.findings import ERROR, WARNING, Finding, example_rows

LEAKAGE_BINS = 50
LEAKAGE_SAMPLE = 200_000
SKEW_PSI_WARNING = 0.25
# A column is judged on the rows where it is present; fewer present rows than this are too few to judge.
MIN_PRESENT_ROWS = 30
# Where one class is almost every row, leakage is judged by the mean recall per class, on at least this many
# held-out rows of each class (fewer could all be predicted right by chance).
MIN_CLASS_ROWS = 10
ID_LIKE_SHARE = 0.95
ID_LIKE_MIN_ROWS = 50


# --- beyond the suite ----------------------------------------------------------------------------


def _nearest_neighbour_predictions(train: pd.Series, y_train: np.ndarray, other: pd.Series, fallback: int) -> np.ndarray:
    """Label of the nearest train value (1-NN on one feature); missing values get the majority label."""
    tv = pd.to_numeric(train, errors="coerce").astype("float64").to_numpy()
    ov = pd.to_numeric(other, errors="coerce").astype("float64").to_numpy()
    keep = np.isfinite(tv)
    tv, ty = tv[keep], y_train[keep]
    if len(tv) == 0:
        return np.full(len(ov), fallback)
    order = np.argsort(tv, kind="stable")
    sv, sy = tv[order], ty[order]
    pos = np.searchsorted(sv, np.nan_to_num(ov))
    left, right = np.clip(pos - 1, 0, len(sv) - 1), np.clip(pos, 0, len(sv) - 1)
    nearest = np.where(np.abs(ov - sv[left]) <= np.abs(sv[right] - ov), left, right)
    return np.where(np.isfinite(ov), sy[nearest], fallback)


def _majority_per_value(train: pd.Series, y_train: np.ndarray, other: pd.Series, fallback: int) -> np.ndarray:
    """The most frequent train label of each value (missing is a value); unseen values get the majority label."""
    codes, _ = pd.factorize(pd.concat([train, other], ignore_index=True), use_na_sentinel=False)
    t_codes, o_codes = codes[: len(train)], codes[len(train) :]
    counts = pd.DataFrame({"code": t_codes, "y": y_train}).value_counts().reset_index()
    best = counts.drop_duplicates("code").set_index("code")["y"]  # value_counts sorts by count, descending
    return pd.Series(o_codes).map(best).fillna(fallback).astype("int64").to_numpy()


def single_feature_predictions(train: pd.Series, y_train: np.ndarray, other: pd.Series, numeric: bool) -> np.ndarray:
    """The label codes of ``other`` predicted from one feature alone.

    Few distinct values (categories, small counts): the majority train label per value. Many distinct
    numbers: the label of the nearest train value (1-NN), which a leaked copy of the label makes exact
    and which binning would blur at bin edges.
    """
    fallback = int(np.bincount(y_train).argmax()) if len(y_train) else 0
    if numeric and train.nunique(dropna=True) > LEAKAGE_BINS:
        return _nearest_neighbour_predictions(train, y_train, other, fallback)
    return _majority_per_value(train, y_train, other, fallback)


def single_feature_accuracy(train: pd.Series, y_train: np.ndarray, other: pd.Series, y_other: np.ndarray,
                            numeric: bool) -> float:
    """Held-out accuracy of predicting the label codes from one feature alone (``single_feature_predictions``)."""
    return float((single_feature_predictions(train, y_train, other, numeric) == y_other).mean())


def _balanced_accuracy(predicted: np.ndarray, truth: np.ndarray) -> float:
    """The mean over the classes in ``truth`` of the share of their rows predicted right (mean recall)."""
    return float(np.mean([(predicted[truth == c] == c).mean() for c in np.unique(truth)]))


def check_label_leakage(data: pd.DataFrame, schema: Schema, threshold: float) -> list[Finding]:
    """No single feature predicts the held-out label almost perfectly (majority per value, or 1-NN)."""
    columns = data[list(dict.fromkeys(schema.features + [schema.label]))]
    is_train = (data[SPLIT_COLUMN] == "train").to_numpy()
    train, held = columns[is_train], columns[~is_train]
    # A seeded sample estimates an accuracy near 1 as well as all rows do, at a fraction of the cost.
    if len(train) > LEAKAGE_SAMPLE:
        train = train.sample(n=LEAKAGE_SAMPLE, random_state=0)
    if len(held) > LEAKAGE_SAMPLE // 4:
        held = held.sample(n=LEAKAGE_SAMPLE // 4, random_state=0)
    if train.empty or held.empty:
        return []
    label_codes, _ = pd.factorize(pd.concat([train[schema.label], held[schema.label]], ignore_index=True).astype(str))
    y_train, y_held = label_codes[: len(train)], label_codes[len(train) :]
    findings = []
    for col in schema.features:
        # Judged where the column is present, so one that only some partitions have cannot hide behind nulls.
        in_train, in_held = train[col].notna().to_numpy(), held[col].notna().to_numpy()
        if in_train.sum() < MIN_PRESENT_ROWS or in_held.sum() < MIN_PRESENT_ROWS:
            continue
        yt, yh = y_train[in_train], y_held[in_held]
        majority = float((yh == np.bincount(yt).argmax()).mean())
        predicted = single_feature_predictions(train[col][in_train], yt, held[col][in_held], col in schema.numeric)
        acc = float((predicted == yh).mean())
        measure, score = "accuracy", acc
        if majority >= threshold:
            # One class is almost every row (fraud, rare churn): the majority label alone reaches the threshold,
            # so the feature is judged by its mean recall per class, which a copy of the label makes 1.
            classes = np.unique(yt)
            if len(classes) < 2:
                continue  # one class where the column is present: nothing to predict
            rows_per_class = np.bincount(yh, minlength=int(max(classes.max(), yh.max())) + 1)[classes]
            if rows_per_class.min() < MIN_CLASS_ROWS:
                findings.append(Finding(
                    check="label_leakage", passed=True, severity=ERROR, column=col, not_applicable=True,
                    message=(f"label leakage of feature '{col}' not judged: one class is {majority:.1%} of the held-out "
                             f"rows where it is present and another has {int(rows_per_class.min())} of them (at least "
                             f"{MIN_CLASS_ROWS} a class are needed to tell a leak from chance)")))
                continue
            measure, score = "balanced accuracy", _balanced_accuracy(predicted, yh)
        leaked = score >= threshold
        where = ("" if in_held.all() else
                 f" on the {int(in_held.sum())} held-out rows where it is present ({in_held.mean():.0%} of them)")
        basis = (f"majority baseline {majority:.3f}" if measure == "accuracy" else
                 f"the mean recall of the classes, since one class is {majority:.1%} of these rows and plain accuracy "
                 f"is {acc:.3f}")
        findings.append(Finding(
            check="label_leakage", passed=not leaked, severity=ERROR, column=col,
            message=(f"label leakage: feature '{col}' alone predicts '{schema.label}' with held-out {measure} {score:.3f}"
                     f"{where} ({basis}). A feature this predictive is usually the label in "
                     "disguise (computed after the outcome); drop it from data.features" if leaked else
                     f"feature '{col}' alone predicts the label with held-out {measure} {score:.3f}{where}"),
            observed=f"{score:.4f}", expected=f"< {threshold}"))
    return findings


def check_label_leakage_per_partition(data: pd.DataFrame, schema: Schema, threshold: float,
                                      partition_column: str, *, pooled_leaks: set[str]) -> list[Finding]:
    """Label leakage judged within each partition as well: a label copied into a feature on one day of many is
    diluted in the pooled judgement (the other days' values predict nothing) but exact within its day.

    Only leaks are reported (one finding per partition and column), and not for the columns the pooled check
    already found leaking (``pooled_leaks``); a partition with too few present rows is not judged.
    """
    findings = []
    for partition, rows in data.groupby(partition_column, sort=True, observed=True):
        for found in check_label_leakage(rows, schema, threshold):
            if found.passed or found.column in pooled_leaks:
                continue
            found.message = (f"label leakage in partition '{partition}' alone (judged within it, not pooled over "
                             f"all partitions): {found.message.removeprefix('label leakage: ')}; check how that "
                             "partition was exported")
            findings.append(found)
    return findings


def check_constant_columns(train: pd.DataFrame, schema: Schema) -> list[Finding]:
    """Features with at most one distinct value on the train rows where they are present."""
    findings = []
    for col in schema.features:
        present = int(train[col].notna().sum())
        distinct = int(train[col].nunique(dropna=True))
        if distinct <= 1:
            where = "" if present == len(train) else f" ({present} of {len(train)} train rows have a value)"
            findings.append(Finding(
                check="constant_column", passed=False, severity=WARNING, column=col,
                message=(f"feature '{col}' is constant in the train split ({distinct} distinct value where present"
                         f"{where}); it carries no signal beyond whether it is missing"),
                observed=f"{distinct} distinct", expected=">= 2 distinct"))
    if not findings:
        findings.append(Finding(check="constant_column", passed=True, severity=WARNING,
                                message="no constant feature column", observed="0 constant", expected="0 constant"))
    return findings


def _identifier_values(series: pd.Series) -> pd.Series | None:
    """The present values if the column could hold identifiers (text, integers, integral floats), else None."""
    values = series.dropna()
    if pd.api.types.is_bool_dtype(series):
        return None
    if pd.api.types.is_float_dtype(series):
        # An integer id column with one null is float64: integral floats can still be identifiers.
        as_float = values.astype("float64")
        return values if bool(np.all(np.isfinite(as_float)) and np.all(as_float == np.round(as_float))) else None
    return values


def check_id_like_columns(train: pd.DataFrame, schema: Schema) -> list[Finding]:
    """Features unique on (almost) every train row where they are present look like identifiers, not signal.

    An integer or text column unique on every train row is an error: a model memorises it (or the order the ids
    were issued in), and a text one is a category no new row ever repeats. Integral floats (an integer id with
    a null) and columns unique on most rows only warn: a measurement can be integral or nearly distinct."""
    findings = []
    for col in schema.features:
        values = _identifier_values(train[col])
        if values is None or len(values) < ID_LIKE_MIN_ROWS:
            continue
        unique_share = values.nunique() / len(values)
        if unique_share >= ID_LIKE_SHARE:
            where = "" if len(values) == len(train) else f" ({len(values)} of {len(train)} have a value)"
            others = [c for c in schema.features if c != col]
            kind = "numeric" if col in schema.numeric else "categorical"
            exact_ids = not pd.api.types.is_float_dtype(train[col]) and len(values) == len(train) and unique_share == 1.0
            severity = ERROR if exact_ids else WARNING
            findings.append(Finding(
                check="id_like_column", passed=False, severity=severity, column=col,
                message=(f"{kind} feature '{col}' has a distinct value on {unique_share:.0%} of the train rows where it "
                         f"is present{where}, like an identifier: a model can memorise it or learn from the order ids "
                         f"were issued in. If it identifies rows, --set data.key={col}; otherwise leave it out of the "
                         f"features (data.features={','.join(others[:6])}{',…' if len(others) > 6 else ''})"),
                observed=f"{unique_share:.2%} distinct", expected=f"< {ID_LIKE_SHARE:.0%} distinct"))
    return findings


def check_cross_split_duplicates(data: pd.DataFrame, schema: Schema, max_fraction: float) -> list[Finding]:
    """Rows whose features and label repeat in another split (they leak the held-out sets into training)."""
    content = data[sorted(schema.all_features + ([schema.label] if schema.label is not None else []))]
    hashes = pd.util.hash_pandas_object(content, index=False).to_numpy()
    splits = data[SPLIT_COLUMN].to_numpy()
    held = splits != "train"
    as_series = pd.Series(hashes)  # pandas' hash-table isin: ~20x faster than np.isin's sort on 1M rows
    dup_mask = held & as_series.isin(hashes[splits == "train"]).to_numpy()
    dup_mask |= (splits == "test") & as_series.isin(hashes[splits == "val"]).to_numpy()
    n_held = int(held.sum())
    count = int(dup_mask.sum())
    fraction = count / n_held if n_held else 0.0
    failed = count > 0
    severity = ERROR if fraction > max_fraction else WARNING
    return [Finding(
        check="cross_split_duplicates", passed=not failed, severity=severity,
        message=(f"{count} val/test row(s) ({fraction:.2%}) repeat a row of an earlier split (its features, and its "
                 "label where the task has one), so the evaluation sees training rows; deduplicate the data or key the split by content "
                 "(data.key=null)" if failed else "no row repeats across splits"),
        observed=f"{count} rows ({fraction:.2%})", expected=f"0 (error above {max_fraction:.2%})",
        examples=example_rows(data, dup_mask, [c for c in (schema.key or schema.label, *schema.features[:4], *schema.other[:1],
                                                        schema.label, SPLIT_COLUMN) if c is not None]))]


# --- skew between the newest partition and the reference -----------------------------------------


def _psi(expected: np.ndarray, actual: np.ndarray) -> float:
    e = np.clip(expected / max(expected.sum(), 1e-12), 1e-6, None)
    a = np.clip(actual / max(actual.sum(), 1e-12), 1e-6, None)
    return float(np.sum((a - e) * np.log(a / e)))


def numeric_psi(reference: dict[str, Any], values: pd.Series) -> float | None:
    """PSI over the reference sample's decile bins (bins shared by both sides, so ties stay consistent)."""
    sample = np.asarray(reference.get("sample") or [], dtype="float64")
    v = pd.to_numeric(values, errors="coerce").astype("float64").to_numpy()
    v = v[np.isfinite(v)]
    if len(sample) == 0 or len(v) == 0:
        return None
    edges = np.unique(np.quantile(sample, np.linspace(0.1, 0.9, 9)))
    expected = np.bincount(np.searchsorted(edges, sample, side="right"), minlength=len(edges) + 1).astype(float)
    actual = np.bincount(np.searchsorted(edges, v, side="right"), minlength=len(edges) + 1).astype(float)
    return _psi(expected, actual)


def categorical_psi(reference: dict[str, Any], values: pd.Series) -> float | None:
    freq: dict[str, float] = {}
    for k, v in (reference.get("frequencies") or {}).items():  # by category_key, as drift compares them
        freq[category_key(str(k))] = freq.get(category_key(str(k)), 0) + v
    if not freq:
        return None
    counts = category_counts(values)
    keys = sorted(set(freq) | set(counts.index))
    return _psi(np.array([freq.get(k, 0) for k in keys], float), np.array([counts.get(k, 0) for k in keys], float))


def check_skew(newest: pd.DataFrame, reference: dict[str, Any], schema: Schema, where: str) -> list[Finding]:
    """PSI of each feature of the newest partition against the reference statistics (warnings only)."""
    findings = []
    for col in schema.features:
        if col in schema.numeric and col in reference.get("numeric", {}):
            psi = numeric_psi(reference["numeric"][col], newest[col])
        elif col in reference.get("categorical", {}):
            psi = categorical_psi(reference["categorical"][col], newest[col])
        else:
            continue
        if psi is None:
            continue
        high = psi > SKEW_PSI_WARNING
        findings.append(Finding(
            check="skew_psi", passed=not high, severity=WARNING, column=col,
            message=(f"feature '{col}' of {where} has shifted from the reference (PSI {psi:.3f})" if high
                     else f"feature '{col}' of {where} matches the reference (PSI {psi:.3f})"),
            observed=f"{psi:.4f}", expected=f"<= {SKEW_PSI_WARNING}"))
    return findings
