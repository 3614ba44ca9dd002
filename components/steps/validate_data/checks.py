"""Structure checks around the GX suite, in plain pandas: columns, schema anomalies, types, partitions, labels.

What the features hold (leakage, constant and id-like columns, cross-split duplicates, skew) is
``feature_checks.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import PARTITION_COLUMN, SPLIT_COLUMN, Schema
from ctpipe.components.lib.data.splits import canonical_text
from ctpipe.components.steps.validate_data.findings import (
    ERROR,
    EXAMPLES,
    SCHEMA_ANOMALY,
    WARNING,
    Finding,
    example_rows,
)
from ctpipe.components.steps.validate_data.suite import column_type

# An object column whose non-null values parse as numbers at least this often is numeric with stray text.
MOSTLY_NUMERIC = 0.9


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
    features = [c for c in reference["numeric"] + reference["categorical"] if c] if reference else []
    if features and not columns.intersection(features):
        # Not a dropped column: another dataset (e.g. one's own data on the home of the demo's champion).
        findings.append(Finding(
            check=SCHEMA_ANOMALY, passed=False, severity=ERROR, source="structure",
            message=(f"schema anomaly (another dataset): none of the reference's feature columns "
                     f"({', '.join(features[:8])}{', …' if len(features) > 8 else ''}) is in the data (columns: "
                     f"{present}), so this is another dataset than the reference suite was profiled on (the "
                     "champion's, when registry.model_name already has one). One registered model follows one "
                     "dataset: give this data its own --set registry.model_name=NAME or another --home, or set "
                     "validation.suite_path to a suite of this data"),
            observed="no reference feature column", expected="the reference's columns"))
        required = [label] if label is not None else []
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


def check_slice_columns(data: pd.DataFrame, slices: list[str]) -> list[Finding]:
    """Every ``evaluate.slices`` column is in the data: the blessing judges slices of the test split after
    training, so a name the data lacks (a typo, another task's column) would fail only then."""
    present = ", ".join(str(c) for c in data.columns)
    return [Finding(
        check="slice_column_exists", passed=False, severity=ERROR, column=col, source="structure",
        message=(f"evaluate.slices names column '{col}', which the data does not have (columns: {present}); the "
                 "slices are judged after training, so fix evaluate.slices now"),
        observed="absent", expected="present") for col in dict.fromkeys(slices) if col not in data.columns]


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
        role = _role_in(reference, col)
        if role:
            findings.append(_role_now_a_feature(col, *role))
            continue
        if data[col].notna().sum() == 0:
            continue  # all missing: the null expectations report it
        was_kind = "numeric" if col in reference.get("numeric", []) else "categorical"
        now_kind = "numeric" if col in schema.numeric else "categorical"
        was_type, now_type = types.get(col), column_type(data[col])
        if col in known and was_kind != now_kind:
            was, now = was_kind, f"{now_kind} (data.categorical)" if now_kind == "categorical" else now_kind
        elif was_type and was_type != now_type:
            was, now = f"{was_kind}, {was_type} values", f"{now_type} values (dtype {data[col].dtype})"
        elif was_type and (other := _partitions_of_another_type(data, col, was_type)):
            # The whole column reads as text because other partitions hold text: one partition's files wrote
            # another type (category codes), which the value set only warns about below 1% of all rows.
            listed = ", ".join(f"partition {p} writes {family} values" for p, family in list(other.items())[:5])
            more = f" (and {len(other) - 5} more partitions)" if len(other) > 5 else ""
            was, now = f"{was_kind}, {was_type} values", f"mixed: {listed}{more}"
        else:
            continue
        findings.append(Finding(
            check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
            message=(f"schema anomaly (type changed): column '{col}' was {was} in the reference schema and is {now} "
                     "now, so its values no longer mean what the model learned. Fix the export; if the change is "
                     "intended, review the suite"),
            observed=now, expected=was))
    return findings


def check_champion_task(champion_task: dict[str, Any] | None, champion: str, record: dict[str, Any]) -> list[Finding]:
    """The champion whose suite is the reference is a model of this run's task (name and entrypoint, as its
    ``ctpipe.task_code`` tag records them; a champion without the tag is not checked). A registered model
    holds one task's versions: another task's suite would report each of its columns as dropped, and its
    model could not be scored on this data after the whole training."""
    from ctpipe.components.tasks.code_identity import task_code_identity
    from ctpipe.components.tasks.registry import BUILTIN_TASKS

    if not champion_task:
        return []
    current = task_code_identity(record)
    if (champion_task.get("name"), champion_task.get("entrypoint")) == (current["name"], current["entrypoint"]):
        return []

    def label(task: dict[str, Any]) -> str:
        builtin = task.get("entrypoint") in BUILTIN_TASKS.values()
        return f"'{task.get('name')}' ({'built-in' if builtin else 'task.entrypoint ' + str(task.get('entrypoint'))})"

    return [Finding(
        check="champion_task", passed=False, severity=ERROR, source="structure",
        message=(f"{champion} is a model of task {label(champion_task)}; this run's task is {label(current)}, so "
                 "neither its suite nor its scores apply to this run. Give each task its own registry.model_name "
                 f"(e.g. --set registry.model_name=ctpipe-{current['name']}) or another --home "
                 "(validation.use_champion_suite=false skips only its suite: the run would still be compared "
                 "with that champion)"),
        observed=f"champion of task {champion_task.get('name')}", expected=f"a champion of task {current['name']}")]


def _role_in(reference: dict[str, Any], col: str) -> tuple[str, str] | None:
    """(what, setting) when ``col`` was the reference's split key or label, so it was never a feature there."""
    if col == reference.get("key"):
        return "split key", "data.key"
    if col == reference.get("label"):
        return "label", "data.label"
    return None


def _role_now_a_feature(col: str, what: str, setting: str) -> Finding:
    # Usually the run's config, not the data, changed: a run without the key the suite was profiled with
    # (e.g. --data on the demo data, whose runs without --data set data.key) reads the key as a feature.
    return Finding(
        check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
        message=(f"schema anomaly (role changed): column '{col}' was the {what} ({setting}) of the reference schema "
                 f"and is a feature in this run, so the model would learn from it. Run with --set {setting}={col} "
                 f"as the reference did; if the change is intended, review the suite"),
        observed="a feature", expected=f"the {what} ({setting}={col})")


def _value_family(value: Any) -> str:
    """The type family (as ``column_type`` names them) of one value of an object column."""
    if isinstance(value, bool | np.bool_):
        return "boolean"
    if isinstance(value, int | float | np.integer | np.floating):
        return "number"
    if isinstance(value, pd.Timestamp | np.datetime64):
        return "datetime"
    return "text"


def _partitions_of_another_type(data: pd.DataFrame, col: str, was_type: str) -> dict[str, str]:
    """{partition: family} for the partitions whose every value of ``col`` is of one type family other than
    ``was_type``: a column of mixed types, as partitions written with different types concatenate to."""
    series = data[col]
    if series.dtype != object or PARTITION_COLUMN not in data.columns \
            or pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):
        return {}
    present = series.notna()
    families = series[present].map(_value_family)
    per_partition = families.groupby(data.loc[present, PARTITION_COLUMN].to_numpy()).agg(
        lambda f: f.iloc[0] if f.nunique() == 1 else "mixed")
    return {str(p): family for p, family in per_partition.items() if family not in ("mixed", was_type)}


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
        family = column_type(series)
        if family == "text" and series.dtype == object:  # booleans with a null read as object
            families = set(non_null.head(1000).map(_value_family))
            family = families.pop() if len(families) == 1 else family
        if col in expected_numeric and family in ("boolean", "datetime"):
            findings.append(_another_type(data, col, non_null, family))  # to_numeric parses them as numbers
            continue
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
                examples=example_rows(data, series.notna() & pd.to_numeric(series, errors="coerce").isna(),
                                   [col, PARTITION_COLUMN])))
    return findings


def _another_type(data: pd.DataFrame, col: str, non_null: pd.Series, family: str) -> Finding:
    """A column the reference says is numeric that arrives as booleans or dates."""
    values = [str(v) for v in non_null.head(EXAMPLES)]
    return Finding(
        check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
        message=(f"schema anomaly (type changed): column '{col}' should be numeric (the reference suite says it is "
                 f"numeric) but arrives as {family} values (dtype {data[col].dtype}), e.g. {values}. Fix the export "
                 "to write the column as numbers; if the change is intended, review the suite"),
        observed=f"dtype {data[col].dtype} ({family} values)", expected="a numeric dtype",
        examples=example_rows(data, data[col].notna(), [col, PARTITION_COLUMN]))


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
        examples=example_rows(data, data[col].notna(), [col, PARTITION_COLUMN]))


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


# --- per partition: a column lost in one partition must not hide behind the others -----------------

# A partition's nulls count as a change when this unlikely under the null share the suite allows.
PARTITION_NULL_P_VALUE = 0.001


def check_partition_nulls(present: pd.DataFrame, rows: pd.Series, suite: dict[str, Any], features: list[str]) -> list[Finding]:
    """Each partition's null share of every feature the reference suite allows some nulls in (``mostly`` < 1).

    The suite judges the whole data root, so one partition that lost a column (an export dropped it, or wrote
    it 90% null) adds under 1% of nulls among a hundred daily partitions and passes ``mostly``. Here a
    partition fails when its share exceeds what the suite allows AND a binomial test at that allowed share
    gives p < PARTITION_NULL_P_VALUE (a small partition's chance nulls do not fail). ``present``: non-null
    counts, partitions x columns (a column a partition's files lack counts 0); ``rows``: rows per partition.
    Never-null columns (``mostly`` = 1) are left to the suite, which fails any null exactly.
    """
    from scipy import stats

    from ctpipe.components.steps.validate_data.suite import severity_of

    findings = []
    for exp in suite.get("expectations", []):
        kw = exp.get("kwargs") or {}
        col, mostly = kw.get("column"), kw.get("mostly")
        if (exp.get("type") != "expect_column_values_to_not_be_null" or (exp.get("meta") or {}).get("ctpipe_table")
                or col not in features or mostly is None or not 0 <= float(mostly) < 1):
            continue
        allowed = 1.0 - float(mostly)
        bad = []
        for part, n in rows.items():
            n = int(n)
            nulls = n - int(present[col].get(part, 0)) if col in present.columns else n
            if n and nulls / n > allowed and stats.binom.sf(nulls - 1, n, allowed) < PARTITION_NULL_P_VALUE:
                bad.append((part, nulls, n))
        if not bad:
            continue
        listed = "; ".join(f"partition {p}: {k} of {n} rows" + (" (it has no value there: the column is absent from "
                                                                  "its files, or all null)" if k == n else "")
                           for p, k, n in bad[:5])
        more = f"; and {len(bad) - 5} more partition(s)" if len(bad) > 5 else ""
        total = float(1 - present[col].sum() / rows.sum()) if col in present.columns and rows.sum() else 1.0
        whole = ("so the whole-data expectation alone would pass" if total <= allowed else
                 "above the allowance too")
        findings.append(Finding(
            check="partition_nulls", passed=False, severity=severity_of(exp), column=col, source="structure",
            message=(f"column '{col}' is null in {len(bad)} partition(s) far more often than the reference suite allows "
                     f"({allowed:.2%}, mostly {float(mostly):g}): {listed}{more}. Over all partitions it is {total:.2%}, "
                     f"{whole}. Re-export those partitions with the column, or "
                     "review the suite if the column is meant to be gone"),
            observed=f"{len(bad)} partition(s) above {allowed:.2%} nulls", expected=f"<= {allowed:.2%} nulls per partition",
            examples=[{"partition": p, "rows": n, "nulls": k} for p, k, n in bad[:EXAMPLES]]))
    if not findings:
        findings.append(Finding(check="partition_nulls", passed=True, source="structure",
                                message="no partition has more nulls than the reference suite allows",
                                observed="0 partitions", expected="0 partitions"))
    return findings
