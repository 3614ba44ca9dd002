"""The Great Expectations suite: profiled from reference data, loaded from JSON, and run on a frame.

A suite is kept as GX 1.x JSON (``ExpectationSuite.to_json_dict()``). Profiling builds that JSON with
plain pandas, so GX (about 4 s to import) is imported only to run the suite. Conventions on top of GX:

* ``severity``: GX's own field; ``critical`` fails the run, ``warning``/``info`` are reported and
  recorded on the model. ``meta.severity`` (``error``/``warning``) overrides it, for hand-written suites.
* ``meta.ctpipe_table == "partitions"``: the expectation runs on a table of per-partition row counts
  (columns ``partition``, ``rows``) instead of the rows themselves.
* ``meta.ctpipe.schema`` on the suite: the columns and kinds the suite was profiled for.
"""

from __future__ import annotations

import json
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import PARTITION_COLUMN, Schema
from ctpipe.components.lib.data.stream_stats import profilable
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.findings import ERROR, WARNING, Finding

PARTITIONS_TABLE = "partitions"
NUMERIC_TYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "Int8", "Int16", "Int32", "Int64", "Float32", "Float64"]
# A value outside the profiled range or set is a warning; more than this share of rows is an error.
TOLERATED_UNEXPECTED = 0.01
# The error range is the observed range widened by this share of its width on each side.
ERROR_RANGE_MARGIN = 1.0
LABEL_KL_WARNING = 0.05
# A continuous label's drift: its deciles and median may move by this share of its train std (a warning).
LABEL_QUANTILES = (0.1, 0.5, 0.9)
LABEL_QUANTILE_SHIFT = 0.25
EXAMPLE_ROWS = 5
MAX_VALUE_SET = 1000


def _expectation(kind: str, severity: str, meta: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    return {"type": kind, "kwargs": kwargs, "meta": meta or {}, "severity": "critical" if severity == ERROR else "warning"}


def partition_rows(data: pd.DataFrame, partitions: list[str]) -> pd.DataFrame:
    """Rows per partition, including partitions whose files hold no rows."""
    counts = data[PARTITION_COLUMN].value_counts() if len(data) else pd.Series(dtype="int64")
    return pd.DataFrame({"partition": partitions, "rows": [int(counts.get(p, 0)) for p in partitions]})


def _range_with_margin(values: pd.Series, margin: float) -> tuple[float, float]:
    lo, hi = float(values.min()), float(values.max())
    pad = margin * (hi - lo) if hi > lo else margin * max(abs(lo), 1.0)
    # A column that was never negative in the reference stays non-negative.
    low = max(lo - pad, 0.0) if lo >= 0 else lo - pad
    return low, hi + pad


def column_type(series: pd.Series) -> str:
    """A column's type family: number, boolean, datetime or text (int and float are one family: a null
    turns an integer column into float64)."""
    if pd.api.types.is_bool_dtype(series):
        return "boolean"
    if pd.api.types.is_numeric_dtype(series):
        return "number"
    if pd.api.types.is_datetime64_any_dtype(series):
        return "datetime"
    return "text"


def _value_set(series: pd.Series) -> list[Any]:
    """Distinct non-null values as plain JSON values of the column's own type (GX compares natively)."""
    values = [v.item() if hasattr(v, "item") else v for v in series.dropna().unique().tolist()]
    return sorted(values, key=lambda v: (str(type(v)), v))


def _label_expectations(train: pd.DataFrame, label: str) -> list[dict[str, Any]]:
    """The label's expectations: no nulls, the train split's value set, two classes or more, its distribution."""
    shares = train[label].dropna().value_counts(normalize=True).sort_index()
    return [
        _expectation("expect_column_values_to_not_be_null", ERROR, column=label),
        _expectation("expect_column_values_to_be_in_set", ERROR, column=label, value_set=_value_set(train[label])),
        _expectation("expect_column_unique_value_count_to_be_between", ERROR, column=label, min_value=2, max_value=None),
        _expectation("expect_column_kl_divergence_to_be_less_than", WARNING, column=label,
                     partition_object={"values": [v.item() if hasattr(v, "item") else v for v in shares.index],
                                       "weights": [float(w) for w in shares]},
                     threshold=LABEL_KL_WARNING),
    ]


def _continuous_label_expectations(train: pd.DataFrame, label: str, range_margin: float) -> list[dict[str, Any]]:
    """A real-valued label's expectations: no nulls, numbers, the profiled range (a warning, and an error
    range as for features), and its distribution (deciles and median within a share of its std: drift)."""
    values = pd.to_numeric(train[label], errors="coerce").dropna()
    values = values[np.isfinite(values.to_numpy(dtype="float64"))]
    exps = [_expectation("expect_column_values_to_not_be_null", ERROR, column=label),
            _expectation("expect_column_values_to_be_in_type_list", ERROR, column=label, type_list=NUMERIC_TYPES)]
    if not len(values):
        return exps
    for severity, margin, mostly in ((WARNING, range_margin, 1.0),
                                     (ERROR, max(range_margin, ERROR_RANGE_MARGIN), 1.0 - TOLERATED_UNEXPECTED)):
        low, high = _range_with_margin(values, margin)
        exps.append(_expectation("expect_column_values_to_be_between", severity, column=label,
                                 min_value=low, max_value=high, mostly=mostly))
    spread = LABEL_QUANTILE_SHIFT * (float(values.std()) if len(values) > 1 else 1.0)
    quantiles = list(LABEL_QUANTILES)
    ranges = [[float(q) - spread, float(q) + spread] for q in values.quantile(quantiles)]
    exps.append(_expectation("expect_column_quantile_values_to_be_between", WARNING, column=label,
                             quantile_ranges={"quantiles": quantiles, "value_ranges": ranges}))
    return exps


def profile_suite(
    train: pd.DataFrame, partitions: pd.DataFrame, schema: Schema, *, range_margin: float,
    null_fraction_allowance: float, min_rows: int, name: str = "ctpipe-profiled", label_kind: str = "classes",
) -> dict[str, Any]:
    """A GX suite JSON profiled from the train split: columns, types, nulls, ranges, sets, rows, labels."""
    exps: list[dict[str, Any]] = []
    columns = ([schema.label] if schema.label is not None else []) + ([schema.key] if schema.key else []) + schema.features
    for col in columns:
        exps.append(_expectation("expect_column_to_exist", ERROR, column=col))
    exps.append(_expectation("expect_table_row_count_to_be_between", ERROR, min_value=int(min_rows), max_value=None))
    for col in schema.features:
        null_fraction = float(train[col].isna().mean()) if len(train) else 0.0
        # Never-null columns are required: any null is an error. Otherwise allow a little more than seen.
        mostly = 1.0 if null_fraction == 0 else max(0.0, 1.0 - null_fraction - null_fraction_allowance)
        exps.append(_expectation("expect_column_values_to_not_be_null", ERROR, column=col, mostly=round(mostly, 6)))
    for col in schema.numeric:
        exps.append(_expectation("expect_column_values_to_be_in_type_list", ERROR, column=col, type_list=NUMERIC_TYPES))
        values = pd.to_numeric(train[col], errors="coerce").dropna()
        # Finite values only: the model reads inf as missing (encoding.py), and one inf would make the range endless;
        # nor values beyond float32's (1e308): the model cannot read them, so the report flags them instead.
        values = values[profilable(values.to_numpy(dtype="float64"))]
        if len(values):
            # Warning: any value outside the observed range plus the margin. Error: more than 1% of
            # values outside a much wider range (sign errors, sentinels, unit changes), so that drift,
            # which is a reason to retrain, only warns.
            for severity, margin, mostly in ((WARNING, range_margin, 1.0),
                                             (ERROR, max(range_margin, ERROR_RANGE_MARGIN), 1.0 - TOLERATED_UNEXPECTED)):
                low, high = _range_with_margin(values, margin)
                exps.append(_expectation("expect_column_values_to_be_between", severity, column=col,
                                         min_value=low, max_value=high, mostly=mostly))
    for col in schema.categorical:
        value_set = _value_set(train[col])
        if len(value_set) > MAX_VALUE_SET:
            continue  # free text or identifiers: a set this large is no expectation a reviewer can read
        for severity, mostly in ((WARNING, 1.0), (ERROR, 1.0 - TOLERATED_UNEXPECTED)):
            exps.append(_expectation("expect_column_values_to_be_in_set", severity, column=col,
                                     value_set=value_set, mostly=mostly))
    if schema.label is not None and label_kind == "continuous":
        exps += _continuous_label_expectations(train, schema.label, range_margin)
    elif schema.label is not None:  # a task with no label: validation reports these as not applicable
        exps += _label_expectations(train, schema.label)
    if schema.key:
        exps.append(_expectation("expect_column_values_to_not_be_null", ERROR, column=schema.key))
        exps.append(_expectation("expect_column_values_to_be_unique", WARNING, column=schema.key))
    rows = partitions["rows"]
    if len(rows):
        exps.append(_expectation("expect_column_values_to_be_between", ERROR, meta={"ctpipe_table": PARTITIONS_TABLE},
                                 column="rows", min_value=max(1, int(math.floor(rows.min() * 0.5))),
                                 max_value=int(math.ceil(rows.max() * 2.0))))
    return {
        "name": name,
        "expectations": exps,
        "meta": {"ctpipe": {"schema": {"label": schema.label, "key": schema.key, "numeric": schema.numeric,
                                       "categorical": schema.categorical, "classes": schema.classes,
                                       "other": schema.other,
                                       "column_types": {c: column_type(train[c]) for c in columns}},
                            "profiled_rows": int(len(train)), "range_margin": range_margin}},
        "notes": "Profiled by ctpipe from the train split. Review it, then commit it and set validation.suite_path.",
    }


def load_suite_file(path: str | Path) -> dict[str, Any]:
    """A suite JSON from disk, with an error that says how to fix a missing or malformed file."""
    p = Path(path)
    if not p.is_file():
        raise DataValidationError(
            f"validation suite '{p}' does not exist. Set validation.suite_path to a GX suite JSON (e.g. the "
            "suite.json of a previous run's snapshot) or to null to profile one from the data."
        )
    try:
        suite = json.loads(p.read_text())
    except json.JSONDecodeError as err:
        raise DataValidationError(f"validation suite '{p}' is not valid JSON ({err}); fix or regenerate it.") from None
    if not isinstance(suite, dict) or not isinstance(suite.get("expectations"), list):
        raise DataValidationError(
            f"validation suite '{p}' is not a Great Expectations 1.x suite: it needs a list under 'expectations'."
        )
    return suite


def champion_suite(
    tracking_uri: str, config
) -> tuple[dict[str, Any], dict[str, Any] | None, str, dict[str, Any] | None] | None:
    """The champion's stored suite and reference stats, its version and the task that made it (its lineage's
    ``task_code``: name, entrypoint; None when not recorded); None without a champion."""
    from ctpipe.components.lib.tracking import fetch_champion_files
    from ctpipe.components.lib.tracking.lineage import LINEAGE_PATH, lineage_from

    if not tracking_uri:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        found = fetch_champion_files(tracking_uri, config.registry,
                                     ["reference/suite.json", "reference/reference_stats.json", LINEAGE_PATH], tmp)
        if found is None or found.files["reference/suite.json"] is None:
            return None
        suite = load_suite_file(found.files["reference/suite.json"])
        stats_file = found.files["reference/reference_stats.json"]
        stats = json.loads(Path(stats_file).read_text()) if stats_file else None
        lineage = lineage_from(found.tags, found.files[LINEAGE_PATH],
                               f"champion {config.registry.model_name} v{found.version}")
    task = lineage.get("task_code")
    return suite, stats, found.version, task if isinstance(task, dict) else None


@dataclass
class Reference:
    """The suite and reference statistics a run is judged against, and where they came from."""

    suite: dict[str, Any] | None
    stats: dict[str, Any] | None
    source: str
    champion_task: dict[str, Any] | None = None  # the champion's task (name, entrypoint) when the suite is its


def resolve_reference(config, tracking_uri: str) -> Reference:
    """The suite to run: the configured file, else the champion's stored one, else none (profile)."""
    if config.validation.suite_path:
        return Reference(load_suite_file(config.validation.suite_path), None, f"file {config.validation.suite_path}")
    if config.validation.use_champion_suite and tracking_uri:
        found = champion_suite(tracking_uri, config)
        if found is not None:
            suite, stats, version, task = found
            return Reference(suite, stats, f"champion {config.registry.model_name} v{version} (reference/suite.json)",
                             task)
    return Reference(None, None, "profiled from this data's train split")


def suite_schema(suite: dict[str, Any]) -> dict[str, Any] | None:
    return ((suite.get("meta") or {}).get("ctpipe") or {}).get("schema")


def severity_of(expectation: dict[str, Any]) -> str:
    meta_severity = (expectation.get("meta") or {}).get("severity")
    if meta_severity in (ERROR, WARNING):
        return meta_severity
    severity = str(expectation.get("severity") or "critical").lower().rsplit(".", 1)[-1]
    return ERROR if severity == "critical" else WARNING


# --- running the suite with an ephemeral GX context -----------------------------------------------


def _gx_context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import ProgressBarsConfig

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)
    return context


def _run_gx(context, name: str, frame: pd.DataFrame, expectations: list[dict[str, Any]]) -> list[Any]:
    from great_expectations.core.expectation_suite import ExpectationSuite

    if not expectations:
        return []
    source = context.data_sources.add_pandas(f"source-{name}")
    batch_def = source.add_dataframe_asset(name).add_batch_definition_whole_dataframe("whole")
    suite = context.suites.add(ExpectationSuite(name=f"suite-{name}", expectations=expectations))
    batch = batch_def.get_batch(batch_parameters={"dataframe": frame})
    return list(batch.validate(suite, result_format="SUMMARY").results)


def run_suite(suite: dict[str, Any], data: pd.DataFrame, partitions: pd.DataFrame) -> list[Finding]:
    """Run every expectation of ``suite`` (rows and per-partition tables); one Finding per expectation."""
    row_exps, part_exps = [], []
    for exp in suite["expectations"]:
        clean = {k: exp[k] for k in ("type", "kwargs", "meta", "severity") if k in exp}
        clean.setdefault("severity", "critical")
        is_part = (exp.get("meta") or {}).get("ctpipe_table") == PARTITIONS_TABLE
        (part_exps if is_part else row_exps).append(clean)
    rows = data.drop(columns=[PARTITION_COLUMN], errors="ignore").reset_index(drop=True)
    try:
        context = _gx_context()
        results = _run_gx(context, "rows", rows, row_exps)
        part_results = _run_gx(context, "partitions", partitions, part_exps)
    except Exception as err:  # a hand-written suite can name unknown expectations or bad kwargs
        raise DataValidationError(
            f"the validation suite '{suite.get('name')}' could not be run by Great Expectations: "
            f"{type(err).__name__}: {str(err)[:300]}. Fix the suite JSON (validation.suite_path) or set it to null."
        ) from None
    # GX does not keep the suite's order: each result carries its own expectation configuration.
    findings = [_finding(r, rows) for r in results]
    findings += [_finding(r, partitions, partition_table=True) for r in part_results]
    return findings


def _describe_expected(kind: str, kw: dict[str, Any]) -> str:
    if kind.endswith("to_be_between") or kind.endswith("count_to_be_between"):
        low, high = kw.get("min_value"), kw.get("max_value")
        text = f"between {_num(low) if low is not None else '-∞'} and {_num(high) if high is not None else '+∞'}"
    elif kind.endswith("to_be_in_set"):
        values = kw.get("value_set") or []
        text = "one of {" + ", ".join(map(str, values[:12])) + (", …" if len(values) > 12 else "") + "}"
    elif kind == "expect_column_values_to_be_in_type_list":
        text = "a numeric dtype"
    elif kind == "expect_column_values_to_not_be_null":
        text = "no nulls"
    elif kind == "expect_column_kl_divergence_to_be_less_than":
        text = f"KL divergence from the reference label distribution < {kw.get('threshold')}"
    elif kind == "expect_column_to_exist":
        text = "the column to exist"
    elif kind == "expect_column_values_to_be_unique":
        text = "unique values"
    else:
        text = ", ".join(f"{k}={v}" for k, v in kw.items() if k not in ("column", "batch_id"))
    mostly = kw.get("mostly")
    if mostly is not None and mostly < 1.0:
        text += f" for at least {mostly:.2%} of rows"
    return text


def _num(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _finding(result: Any, frame: pd.DataFrame, *, partition_table: bool = False) -> Finding:
    exp = result.expectation_config.to_json_dict()
    kind, kw = exp["type"], exp.get("kwargs", {})
    res = dict(result.result or {})
    column = kw.get("column")
    if partition_table:
        column = None
    observed = ""
    if "unexpected_count" in res:
        observed = f"{res['unexpected_count']} of {res.get('element_count')} rows ({res.get('unexpected_percent') or 0:.3g}%) unexpected"
    elif "observed_value" in res:
        value = res["observed_value"]
        observed = f"{value:.4g}" if isinstance(value, float) else str(value)
    exc = (result.exception_info or {}) if isinstance(result.exception_info, dict) else {}
    if exc.get("raised_exception"):
        observed = f"error: {str(exc.get('exception_message'))[:200]}"
    examples: list[dict[str, Any]] = []
    index = res.get("partial_unexpected_index_list") or []
    if not result.success and index:
        picked = frame.iloc[[int(i) for i in index[:EXAMPLE_ROWS] if isinstance(i, int | np.integer)]]
        examples = _rows_as_records(picked)
    elif not result.success and res.get("partial_unexpected_list"):
        examples = [{"value": v} for v in res["partial_unexpected_list"][:EXAMPLE_ROWS]]
    if partition_table and "unexpected_count" in res:  # the table's rows are partitions: name them
        named = ", ".join(f"{e.get('partition')}: {e.get('rows')} rows" for e in examples)
        observed = (f"{res['unexpected_count']} of {res.get('element_count')} partitions unexpected"
                    + (f" ({named})" if named else ""))
    label = "partition row count" if partition_table else kind.removeprefix("expect_").replace("_", " ")
    where = "" if partition_table else (f" on column '{column}'" if column else "")
    return Finding(
        check=kind, passed=bool(result.success), severity=severity_of(exp), column=column,
        message=f"{label}{where}", observed=observed, expected=_describe_expected(kind, kw),
        examples=examples, source="suite",
    )


def _rows_as_records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    out = []
    for idx, row in frame.iterrows():
        record: dict[str, Any] = {"row": int(idx) if isinstance(idx, int | np.integer) else str(idx)}
        for col, value in row.items():
            record[str(col)] = None if _is_missing(value) else (value.item() if hasattr(value, "item") else value)
        out.append(record)
    return out


def _is_missing(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
