"""Checks around the GX suite, in plain pandas: structure, leakage, constant columns, duplicates, skew."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from components.data.snapshot import PARTITION_COLUMN, SPLIT_COLUMN, Schema
from components.data.splits import canonical_text
from components.validation.findings import ERROR, SCHEMA_ANOMALY, WARNING, Finding
from components.validation.suite import column_type

# An object column whose non-null values parse as numbers at least this often is numeric with stray text.
MOSTLY_NUMERIC = 0.9
LEAKAGE_BINS = 50
LEAKAGE_SAMPLE = 200_000
SKEW_PSI_WARNING = 0.25
EXAMPLES = 5
# A column is judged on the rows where it is present; fewer present rows than this are too few to judge.
MIN_PRESENT_ROWS = 30
ID_LIKE_SHARE = 0.95
ID_LIKE_MIN_ROWS = 50


def _examples(frame: pd.DataFrame, mask: pd.Series | np.ndarray, columns: list[str]) -> list[dict[str, Any]]:
    picked = frame.loc[np.asarray(mask), [c for c in columns if c in frame.columns]].head(EXAMPLES)
    out = []
    for idx, row in picked.iterrows():
        rec: dict[str, Any] = {"row": int(idx) if isinstance(idx, int | np.integer) else str(idx)}
        rec.update({str(k): (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()})
        out.append(rec)
    return out


# --- structure: columns and types, before the schema is inferred ---------------------------------


def check_required_columns(data: pd.DataFrame, reference: dict[str, Any] | None, label: str | None) -> list[Finding]:
    """The label (None: the task needs none) and every column of the reference schema are present."""
    columns = set(data.columns)
    required = [label] if label is not None else []
    if reference:
        required += [c for c in [reference.get("key")] + reference["numeric"] + reference["categorical"]
                     + reference.get("other", []) if c]
    findings = []
    present = ", ".join(str(c) for c in data.columns if c != PARTITION_COLUMN)
    for col in dict.fromkeys(required):
        if col not in columns:
            if col == label:
                findings.append(Finding(
                    check="column_exists", passed=False, severity=ERROR, column=col, source="structure",
                    message=f"label column '{col}' is missing from the data (columns: {present}). "
                            "Name the label with --set data.label=COLUMN.",
                    observed="absent", expected="present"))
                continue
            findings.append(Finding(
                check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
                message=(f"schema anomaly (column dropped): reference-suite column '{col}' is missing from the data "
                         f"(columns: {present}). Restore the column in the data, or review the suite "
                         "(validation.suite_path) if it was dropped on purpose."),
                observed="absent", expected=f"present ({_kind_in(reference, col)})"))
    return findings


def _kind_in(reference: dict[str, Any], col: str) -> str:
    if col == reference.get("key"):
        return "key"
    if col == reference.get("label"):
        return "label"
    if col in reference.get("other", []):
        return "the task's own column"
    return "numeric" if col in reference.get("numeric", []) else "categorical"


def check_schema_changes(data: pd.DataFrame, reference: dict[str, Any] | None, schema: Schema) -> list[Finding]:
    """Columns the reference schema does not have, and columns whose kind changed (TFX-style schema anomalies).

    A new column is a warning (it becomes a feature unless data.features leaves it out); a column that
    was numeric and is now categorical, or the reverse, is an error: the model would read it another way.
    Dropped columns are reported by ``check_required_columns``, before the schema is inferred.
    """
    if not reference:
        return []
    known = {reference.get("label"), reference.get("key"), *reference.get("numeric", []),
             *reference.get("categorical", []), *reference.get("other", [])}
    findings = []
    for col in data.columns:
        if col in known or col in (PARTITION_COLUMN, SPLIT_COLUMN, schema.key, "date"):
            continue
        present = data[col].notna()
        parts = sorted(data.loc[present, PARTITION_COLUMN].unique()) if PARTITION_COLUMN in data else []
        use = ("it is used as a feature of this run's model" if col in schema.features else
               "it is not a feature (data.features leaves it out)")
        findings.append(Finding(
            check=SCHEMA_ANOMALY, passed=False, severity=WARNING, column=col, source="structure",
            message=(f"schema anomaly (new column): column '{col}' is not in the reference schema; it is present in "
                     f"{int(present.sum())} of {len(data)} rows ({len(parts)} partition(s), from {parts[0] if parts else '-'}) "
                     f"and {use}. A new feature is fine; a column computed after the outcome, or one only some "
                     "partitions have, should be left out with data.features"),
            observed=f"new column, dtype {data[col].dtype}", expected="absent"))
    types = reference.get("column_types") or {}
    for col in schema.features:
        if data[col].notna().sum() == 0:
            continue  # all missing: the null expectations report it
        was_kind = "numeric" if col in reference.get("numeric", []) else "categorical"
        now_kind = "numeric" if col in schema.numeric else "categorical"
        was_type, now_type = types.get(col), column_type(data[col])
        if col in known and was_kind != now_kind:
            was, now = was_kind, f"{now_kind} (data.categorical)" if now_kind == "categorical" else now_kind
        elif was_type and was_type != now_type:
            was, now = f"{was_kind}, {was_type} values", f"{now_type} values (dtype {data[col].dtype})"
        else:
            continue
        findings.append(Finding(
            check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
            message=(f"schema anomaly (type changed): column '{col}' was {was} in the reference schema and is {now} "
                     "now, so its values no longer mean what the model learned. Fix the export; if the change is "
                     "intended, review the suite"),
            observed=now, expected=was))
    return findings


def check_numeric_types(data: pd.DataFrame, reference: dict[str, Any] | None, categorical: list[str]) -> list[Finding]:
    """Numeric columns (per the reference, or mostly-numeric ones) hold no text values."""
    findings = []
    expected_numeric = set(reference["numeric"]) if reference else set()
    for col in data.columns:
        if col == PARTITION_COLUMN or col in categorical:
            continue
        series = data[col]
        if pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series):
            continue
        non_null = series.dropna()
        if non_null.empty:
            continue
        # Parsing text is slow on big columns: a text column none of whose first values parse is not numeric.
        if col not in expected_numeric and pd.to_numeric(non_null.iloc[:1000], errors="coerce").notna().mean() < 0.5:
            continue
        parsed = pd.to_numeric(non_null, errors="coerce")
        bad = parsed.isna()
        share_numeric = 1.0 - float(bad.mean())
        if col in expected_numeric and not bad.any():
            findings.append(_numbers_as_text(data, col, non_null))
            continue
        if col in expected_numeric or (share_numeric >= MOSTLY_NUMERIC and bad.any()):
            why = ("the reference suite says it is numeric" if col in expected_numeric
                   else f"{share_numeric:.1%} of its values are numbers")
            values = sorted({str(v) for v in non_null[bad].head(50)})[:EXAMPLES]
            anomaly = "schema anomaly (type changed): " if col in expected_numeric else ""
            findings.append(Finding(
                check=SCHEMA_ANOMALY if anomaly else "numeric_type", passed=False, severity=ERROR, column=col,
                source="structure",
                message=(f"{anomaly}column '{col}' should be numeric ({why}) but holds {int(bad.sum())} non-numeric value(s), "
                         f"e.g. {values}. Fix those values at the source, or list the column in data.categorical "
                         "if it really is categorical"),
                observed=f"dtype {series.dtype}", expected="a numeric dtype",
                examples=_examples(data, series.notna() & pd.to_numeric(series, errors="coerce").isna(),
                                   [col, PARTITION_COLUMN])))
    return findings


def _numbers_as_text(data: pd.DataFrame, col: str, non_null: pd.Series) -> Finding:
    """A column the reference says is numeric whose every value is a number written as text."""
    values = [str(v) for v in non_null.head(EXAMPLES)]
    return Finding(
        check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
        message=(f"schema anomaly (type changed): column '{col}' should be numeric (the reference suite says it is "
                 f"numeric) but arrives as text (dtype {data[col].dtype}): all {len(non_null)} non-null values are "
                 f"numbers written as text, e.g. {values}. Fix the export to write the column as numbers (a CSV "
                 "reader or a schema cast upstream turned it into strings)"),
        observed=f"dtype {data[col].dtype} (numbers as text)", expected="a numeric dtype",
        examples=_examples(data, data[col].notna(), [col, PARTITION_COLUMN]))


def check_empty_partitions(partitions: pd.DataFrame) -> list[Finding]:
    empty = partitions.loc[partitions["rows"] == 0, "partition"].tolist()
    if not empty:
        return [Finding(check="empty_partitions", passed=True, source="structure", message="no empty partition",
                        observed="0 empty", expected="0 empty")]
    return [Finding(
        check="empty_partitions", passed=False, severity=ERROR, source="structure",
        message=(f"{len(empty)} partition(s) hold no rows: {', '.join(empty[:5])}. An empty partition usually means a "
                 "failed export; re-export it or remove it from the data root"),
        observed=f"{len(empty)} empty", expected="every partition has rows",
        examples=[{"partition": p, "rows": 0} for p in empty[:EXAMPLES]])]


def check_label_classes(labels: pd.Series) -> list[Finding]:
    """A classifier needs at least two label classes in the data."""
    counts = canonical_text(labels).dropna().value_counts()
    ok = len(counts) >= 2
    top = f"'{counts.index[0]}'" if len(counts) else "(none)"
    return [Finding(
        check="label_classes", passed=ok, severity=ERROR, column=str(labels.name), source="structure",
        message=(f"label column '{labels.name}' has {len(counts)} classes" if ok else
                 f"every labelled row has the same label {top} in column '{labels.name}': a classifier needs at least "
                 "two classes. Check the export of the label (a join or a filter may have dropped the other classes)"),
        observed=f"{len(counts)} classes", expected=">= 2 classes")]


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


def single_feature_accuracy(train: pd.Series, y_train: np.ndarray, other: pd.Series, y_other: np.ndarray,
                            numeric: bool) -> float:
    """Held-out accuracy of predicting the label codes from one feature alone.

    Few distinct values (categories, small counts): the majority train label per value. Many distinct
    numbers: the label of the nearest train value (1-NN), which a leaked copy of the label makes exact
    and which binning would blur at bin edges.
    """
    fallback = int(np.bincount(y_train).argmax()) if len(y_train) else 0
    if numeric and train.nunique(dropna=True) > LEAKAGE_BINS:
        predicted = _nearest_neighbour_predictions(train, y_train, other, fallback)
    else:
        predicted = _majority_per_value(train, y_train, other, fallback)
    return float((predicted == y_other).mean())


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
    baseline = float((y_held == np.bincount(y_train).argmax()).mean())
    if baseline >= threshold:
        return []  # one class dominates: the label-distribution checks report it, leakage is meaningless
    findings = []
    for col in schema.features:
        # Judged where the column is present, so one that only some partitions have cannot hide behind nulls.
        in_train, in_held = train[col].notna().to_numpy(), held[col].notna().to_numpy()
        if in_train.sum() < MIN_PRESENT_ROWS or in_held.sum() < MIN_PRESENT_ROWS:
            continue
        yt, yh = y_train[in_train], y_held[in_held]
        majority = float((yh == np.bincount(yt).argmax()).mean())
        if majority >= threshold:
            continue  # one class dominates where the column is present: accuracy says nothing there
        acc = single_feature_accuracy(train[col][in_train], yt, held[col][in_held], yh, col in schema.numeric)
        leaked = acc >= threshold
        where = ("" if in_held.all() else
                 f" on the {int(in_held.sum())} held-out rows where it is present ({in_held.mean():.0%} of them)")
        findings.append(Finding(
            check="label_leakage", passed=not leaked, severity=ERROR, column=col,
            message=(f"label leakage: feature '{col}' alone predicts '{schema.label}' with held-out accuracy {acc:.3f}"
                     f"{where} (majority baseline {majority:.3f}). A feature this predictive is usually the label in "
                     "disguise (computed after the outcome); drop it from data.features" if leaked else
                     f"feature '{col}' alone predicts the label with held-out accuracy {acc:.3f}{where}"),
            observed=f"{acc:.4f}", expected=f"< {threshold}"))
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
    """Features unique on (almost) every train row where they are present look like identifiers, not signal."""
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
            findings.append(Finding(
                check="id_like_column", passed=False, severity=WARNING, column=col,
                message=(f"{kind} feature '{col}' has a distinct value on {unique_share:.0%} of the train rows where it "
                         f"is present{where}, like an identifier: a model can memorise it or learn from the order ids "
                         f"were issued in. If it identifies rows set data.key={col}; otherwise leave it out of the "
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
        message=(f"{count} val/test row(s) ({fraction:.2%}) duplicate the features and label of a row in an earlier "
                 "split, so the evaluation sees training rows; deduplicate the data or key the split by content "
                 "(data.key=null)" if failed else "no row repeats across splits"),
        observed=f"{count} rows ({fraction:.2%})", expected=f"0 (error above {max_fraction:.2%})",
        examples=_examples(data, dup_mask, [c for c in (schema.key or schema.label, *schema.features[:4], *schema.other[:1],
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
    freq = reference.get("frequencies") or {}
    if not freq:
        return None
    counts = values.dropna().astype(str).value_counts()
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
