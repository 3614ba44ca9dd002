"""validate_data: fingerprint, read, check, split and snapshot the data, with a GX suite as the gate.

Order: list + fingerprint the files → read them (a corrupt file is named) → structure checks against
the reference schema (missing columns, text in numeric columns, empty partitions) → schema and stable
splits → the GX suite (from ``validation.suite_path``, else the champion's stored suite, else profiled
from this train split) → checks beyond the suite (leakage, label shares per partition, image layout, constant
columns, cross-split duplicates, skew) → reports. Error-severity failures raise ``DataValidationError`` after the reports are written.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data import scan as stream
from ctpipe.components.lib.data.reference_stats import (
    compute_reference_stats,
)
from ctpipe.components.lib.data.snapshot import (
    PARTITION_COLUMN,
    SPLIT_COLUMN,
    Schema,
    assign_splits,
    fingerprint_files,
    infer_schema,
    read_data,
    split_keys,
)
from ctpipe.components.lib.data.window import TrainWindow, partition_date
from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.lib.handoffs import ValidationVerdict, write_validation
from ctpipe.components.lib.tracking import RetryPolicy, log_step
from ctpipe.components.steps.validate_data import checks, feature_checks, partition_types
from ctpipe.components.steps.validate_data.beyond_suite import label_findings, layout_findings
from ctpipe.components.steps.validate_data.engines import check_width, open_engine
from ctpipe.components.steps.validate_data.exact import exact_overrides, exact_profile
from ctpipe.components.steps.validate_data.findings import (
    ERROR,
    Finding,
    errors,
    example_rows,
    label_checks_not_applicable,
    warnings,
)
from ctpipe.components.steps.validate_data.label_kind import check_label_kind
from ctpipe.components.steps.validate_data.report import ValidationSummary, write_reports
from ctpipe.components.steps.validate_data.suite import (
    Reference,
    partition_rows,
    profile_suite,
    resolve_reference,
    run_suite,
    suite_schema,
)
from ctpipe.components.steps.validate_data.task_reference import add_task_drift_stats

MAX_LISTED_ERRORS = 8


@dataclass
class ValidationResult:
    """What the pipeline needs from validation: the data version, split sizes and warnings."""

    fingerprint: str
    rows: dict[str, int]
    warnings: list[str] = field(default_factory=list)
    suite_source: str = ""
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    data_docs: str = ""  # the Data Docs page and the Markdown report, as a person opens them (with extensions)
    report: str = ""

    def summary(self) -> dict[str, Any]:
        return {"fingerprint": self.fingerprint, "rows": self.rows, "warnings": self.warnings,
                "suite_source": self.suite_source, "seconds": round(self.seconds, 3),
                "data_docs": self.data_docs, "report": self.report}


def validate_data(
    data_uri: str, config: Config, *, snapshot_dir: str, data_docs_path: str, report_path: str,
    tracking_uri: str, mlflow_run_id: str,
) -> ValidationResult:
    """Validate the data under ``data_uri`` and write the snapshot; raise DataValidationError on errors."""
    from ctpipe.components.tasks import load_task

    started = time.perf_counter()
    task = load_task(config.task)  # a missing or incomplete task fails here, before any data is read
    summary = ValidationSummary(data_uri=data_uri)
    with open_engine(data_uri, config) as engine:
        try:
            outcome = _run(data_uri, config, tracking_uri, summary, task, engine)
        except UserError as err:  # unreadable root/file, unknown label, broken suite: still write the reports
            summary.findings.append(Finding(check="read_data", passed=False, severity=ERROR, source="structure",
                                            message=str(err).rstrip(".")))
            outcome = _Outcome(None, None)
        if not errors(summary.findings) and outcome.inputs is not None:
            t = time.perf_counter()
            try:
                _write_snapshot(snapshot_dir, outcome, data_uri, summary.fingerprint, task, config, engine)
            except partition_types.conversion_errors() as err:  # a value of another type: the data's, named
                summary.findings.append(partition_types.conversion_finding(err))
            summary.seconds["write_snapshot"] = time.perf_counter() - t
        if not errors(summary.findings) and outcome.inputs is not None:
            # In the snapshot, so later steps (model card, registration tags) read the verdict from a file.
            write_validation(snapshot_dir, ValidationVerdict(**summary_json(summary)))
    shown_docs, shown_report = write_reports(summary, data_docs_path=data_docs_path, report_path=report_path)
    suite_copy = str(Path(snapshot_dir) / "suite.json") if snapshot_dir else ""
    # Named with the extensions a browser and MLflow's artifact viewer need: KFP names an output file after
    # the output alone (``data_docs``), which a browser shows as raw source.
    reports = {"validation/data_docs.html": data_docs_path, "validation/validation_report.md": report_path,
               "validation/suite.json": suite_copy}
    _log_to_mlflow(tracking_uri, mlflow_run_id, summary, reports, config)
    if errors(summary.findings):
        failure = DataValidationError(_error_message(summary, shown_report, shown_docs))
        failure.summary = summary_json(summary)  # every finding, for a caller that reports them (spark_driver.py)
        raise failure
    return ValidationResult(
        fingerprint=summary.fingerprint,
        rows=summary.rows,
        warnings=[f.headline() for f in warnings(summary.findings)],
        suite_source=summary.suite_source,
        seconds=time.perf_counter() - started,
        findings=summary.findings,
        data_docs=shown_docs,
        report=shown_report,
    )


# --- helpers ---------------------------------------------------------------------------------------


def _schema_for(data: pd.DataFrame, config: Config, reference: dict[str, Any] | None, label: str | None,
                label_kind: str = "classes") -> Schema:
    """Infer the schema from config; a reference suite's categorical columns stay categorical."""
    categorical = list(config.data.categorical)
    if reference and not config.data.categorical:
        categorical = [c for c in reference.get("categorical", []) if c in data.columns]
    features = list(config.data.features)
    return infer_schema(data, label=label, key=config.data.key, features=features, categorical=categorical,
                        text_column=config.data.text_column, label_kind=label_kind)


def _skew_findings(data: pd.DataFrame, schema: Schema, ref: Reference, partitions: list[str]) -> list[Finding]:
    """Newest partition vs the champion's reference stats, or vs the older partitions of this data."""
    if not partitions:
        return []
    newest = partitions[-1]
    features = data[schema.features]
    is_newest = (data[PARTITION_COLUMN] == newest).to_numpy()
    new_rows = features[is_newest]
    if new_rows.empty:
        return []
    if ref.stats is not None:
        return feature_checks.check_skew(new_rows, ref.stats, schema, f"partition {newest} (vs the champion's reference)")
    older = features[~is_newest]
    if len(partitions) < 2 or older.empty:
        return []
    stats = compute_reference_stats(older, schema)
    return feature_checks.check_skew(new_rows, stats, schema, f"partition {newest} (vs the older partitions)")


def _structure(data: pd.DataFrame, config: Config, reference_schema: dict[str, Any] | None,
               parts: pd.DataFrame, label: str | None, task: Any) -> list[Finding]:
    found = checks.check_required_columns(data, reference_schema, label)
    found += checks.check_numeric_types(data, reference_schema, list(config.data.categorical))
    found += checks.check_empty_partitions(parts)
    found += checks.check_slice_columns(data, list(config.evaluate.slices))
    if label in data.columns and data[label].isna().any():
        n = int(data[label].isna().sum())
        found.append(Finding(
            check="label_not_null", passed=False, severity=ERROR, column=label, source="structure",
            message=f"{n} row(s) have no label in column '{label}'; drop or label them",
            observed=f"{n} nulls", expected="no nulls",
            examples=example_rows(data, data[label].isna(), list(data.columns)[:8])))
    if label in data.columns:
        # The label's kind first: a continuous label given to a classifier is no matter of class counts.
        kind = check_label_kind(data[label], task.codec.label_kind, task.name)
        found += kind
        if task.codec.label_kind == "classes" and not errors(kind):
            found += checks.check_label_classes(data[label])
    return found


def _window_findings(config: Config, partitions: list[str]) -> list[Finding]:
    """data.window_days needs a date in every partition's path (checked before any work is written)."""
    if config.data.window_days is None:
        return []
    undated = [p for p in partitions if partition_date(p) is None]
    if not undated:
        return []
    return [Finding(
        check="train_window", passed=False, severity=ERROR, source="structure",
        message=(f"data.window_days={config.data.window_days} needs a date (YYYY-MM-DD) in every partition path, but "
                 f"{len(undated)} partition(s) have none: {', '.join(undated[:5])}. Partition the data as "
                 "date=YYYY-MM-DD/ or set data.window_days=null (data.max_train_rows needs no dates)"),
        observed=f"{len(undated)} undated partition(s)", expected="a date in every partition path")]


def _batch_size_findings(config: Config, train_rows: int, task: Any) -> list[Finding]:
    """train.batch_size against the train rows each worker gets, here rather than inside the ranks after the
    sanity gate. Each of train.workers ranks gets ``train_rows // workers`` rows (the sampler drops the rest)
    and needs one full batch; data.max_train_rows caps the rows (data.window_days is known only when the
    snapshot is written; the ranks check that case). Only for a task with one example per row."""
    if not task.codec.rowwise or train_rows == 0:
        return []
    t = config.train
    rows = train_rows if config.data.max_train_rows is None else min(train_rows, config.data.max_train_rows)
    per_worker = rows // t.workers
    if t.batch_size <= per_worker:
        return []
    return [Finding(
        check="train_batch_size", passed=False, severity=ERROR, source="config",
        message=(f"train.batch_size={t.batch_size} is larger than the {per_worker} training rows each worker gets "
                 f"({rows} train rows over train.workers={t.workers}), so no worker could fill one batch; "
                 f"set train.batch_size to at most {max(per_worker, 1)}, lower train.workers, or add data"),
    )]


def _run(data_uri: str, config: Config, tracking_uri: str, summary: ValidationSummary, task: Any,
         engine: Any) -> _Outcome:
    from ctpipe.components.tasks import label_column, task_record

    timer = _Timer(summary.seconds)
    label = label_column(task, config.data)  # None: the task needs no label, its checks do not apply
    files = engine.list_files(data_uri, config)
    summary.fingerprint = fingerprint_files(files)
    summary.files = len(files)
    check_width(data_uri, files, config)
    summary.findings += partition_types.duplicate_headers(data_uri, files, config.data.format)
    if errors(summary.findings):
        return _Outcome(None, None)
    total = engine.count_rows(data_uri, files, config)
    scanned = None
    if engine.streams(total, config, len(files)):
        # Too large for one frame (or on Spark): exact figures in one streaming pass, the row checks on a sample.
        scanned = engine.scan(data_uri, files, config, label=label, stratify_by_label=task.codec.label_kind == "classes",
                              total=total)
        data = scanned.sample
        summary.judged_on = scanned.judged_on()
    else:
        data = read_data(data_uri, files, config.data.format)
    timer.lap("read")
    ref = resolve_reference(config, tracking_uri)
    summary.suite_source = ref.source
    timer.lap("reference_suite")  # with a tracking URI: importing MLflow and asking for the champion
    summary.findings += checks.check_champion_task(ref.champion_task, ref.source.split(" (")[0],
                                                   task_record(config.task))
    if errors(summary.findings):
        return _Outcome(None, None)
    reference_schema = suite_schema(ref.suite) if ref.suite else None
    partitions = sorted({_partition(f.path) for f in files})
    parts = partition_rows(data, partitions)
    if scanned is not None:
        parts["rows"] = [scanned.rows.get(p, 0) for p in partitions]
    summary.partitions = parts.to_dict("records")
    summary.findings += _structure(data, config, reference_schema, parts, label, task)
    if label is None:
        summary.findings += label_checks_not_applicable(task.name)
    summary.findings += _window_findings(config, partitions)
    if errors(summary.findings):
        return _Outcome(None, None)
    schema = _schema_for(data, config, reference_schema, label, task.codec.label_kind)
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    summary.findings += checks.check_schema_changes(data, reference_schema, schema)
    if errors(summary.findings):
        return _Outcome(None, None)
    summary.schema = {"label": schema.label, "key": schema.key, "numeric": schema.numeric,
                      "categorical": schema.categorical, "classes": schema.classes, "text_column": schema.text_column}
    data[SPLIT_COLUMN] = assign_splits(split_keys(data, schema), val_fraction=config.data.val_fraction,
                                       test_fraction=config.data.test_fraction, salt=config.data.split_salt)
    summary.rows = (scanned.split_rows() if scanned is not None
                    else {s: int((data[SPLIT_COLUMN] == s).sum()) for s in ("train", "val", "test")})
    summary.findings += _batch_size_findings(config, summary.rows.get("train", 0), task)
    train = data[data[SPLIT_COLUMN] == "train"]
    # Before the suite is profiled: an identifier read as a feature stops here, in seconds, naming data.key.
    summary.findings += feature_checks.check_id_like_columns(train, schema)
    if errors(summary.findings):
        return _Outcome(None, None)
    timer.lap("schema_and_splits")
    suite = ref.suite or profile_suite(
        train, parts, schema, range_margin=config.validation.range_margin,
        null_fraction_allowance=config.validation.null_fraction_allowance, min_rows=config.validation.min_rows,
        label_kind=task.codec.label_kind)
    if scanned is not None and ref.suite is None:
        v = config.validation
        suite = exact_profile(suite, scanned, schema.label, range_margin=v.range_margin,
                              null_fraction_allowance=v.null_fraction_allowance)
    timer.lap("profile")
    # The task's own expectations (an image decodes, a text is valid UTF-8) run in the same suite, over
    # columns it derives from the rows; they are added at every run, not stored in the profiled suite.
    task_suite = {**suite, "expectations": [*suite["expectations"], *task.profile.expectations(schema)]}
    checked = data.drop(columns=[SPLIT_COLUMN])
    derived = task.profile.check_columns(checked, schema)
    if len(derived.columns):
        checked = pd.concat([checked, derived], axis=1)
    summary.findings += run_suite(task_suite, checked, parts)
    if ref.suite is not None:  # a partition that lost a column the reference knew (a profiled suite has no prior)
        present = (pd.DataFrame.from_dict(scanned.present, orient="index").fillna(0) if scanned is not None
                   else data[schema.features].notna().groupby(data[PARTITION_COLUMN]).sum())
        summary.findings += checks.check_partition_nulls(present, parts.set_index("partition")["rows"], suite,
                                                         schema.features)
    timer.lap("great_expectations")
    v = config.validation
    if label is not None:
        summary.findings += label_findings(data, schema, task.codec.label_kind, v.leakage_threshold,
                                           reference_suite=ref.suite, weights=scanned.weights if scanned else None)
    summary.findings += layout_findings(data, schema, task, ref.stats)
    summary.findings += feature_checks.check_constant_columns(train, schema)
    summary.findings += feature_checks.check_cross_split_duplicates(data, schema, v.max_duplicate_fraction)
    summary.findings += _skew_findings(data, schema, ref, partitions)
    if scanned is not None:
        summary.findings = exact_overrides(summary.findings, scanned, suite, config)
    timer.lap("checks_beyond_suite")
    if not errors(summary.findings):  # what the checks above let through that the snapshot cannot hold
        summary.findings += partition_types.mixed_partition_types(data, files)
    return _Outcome(suite, _SnapshotInputs(data, schema, files, TrainWindow.from_config(config.data), config.data.format, scanned))


@dataclass
class _SnapshotInputs:
    data: pd.DataFrame
    schema: Schema
    files: list
    window: TrainWindow | None = None
    format: str = "auto"
    scan: stream.Scan | None = None  # set when the data was streamed: the snapshot is written in a second pass


@dataclass
class _Outcome:
    suite: dict[str, Any] | None
    inputs: _SnapshotInputs | None


class _Timer:
    def __init__(self, into: dict[str, float]) -> None:
        self.into, self.last = into, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.into[name] = now - self.last
        self.last = now


def _partition(rel_path: str) -> str:
    parts = rel_path.split("/")[:-1]
    return "/".join(parts) if parts else rel_path


def _write_snapshot(snapshot_dir: str, outcome: _Outcome, data_uri: str, fingerprint: str, task: Any,
                    config: Config, engine: Any) -> None:
    snapshot = engine.write_snapshot(snapshot_dir, outcome.inputs, data_uri, fingerprint, task, config)
    atomic_write_text(Path(snapshot_dir) / "suite.json", json.dumps(outcome.suite, indent=2, default=str))
    add_task_drift_stats(snapshot, task)


def _error_message(summary: ValidationSummary, report_path: str, data_docs_path: str = "") -> str:
    errs = errors(summary.findings)
    listed = "; ".join(f"({i + 1}) {f.headline()}" for i, f in enumerate(errs[:MAX_LISTED_ERRORS]))
    more = f"; and {len(errs) - MAX_LISTED_ERRORS} more" if len(errs) > MAX_LISTED_ERRORS else ""
    where = f" Full report: {report_path}." if report_path else ""
    where += f" Every check, in a browser: {data_docs_path}." if data_docs_path else ""
    if any(f.check == "champion_task" for f in errs):  # the config picked the wrong champion, not a data change
        return (f"data validation failed for '{summary.data_uri}' with {len(errs)} error(s): {listed}{more}. "
                f"Change the setting it names and run again.{where}")
    if summary.suite_source.startswith("champion"):
        review = (f"review the suite ({summary.suite_source}; 'ctpipe suite champion --out FILE' fetches it) and "
                  "pass the edited file as validation.suite_path, or set validation.use_champion_suite=false to "
                  "profile a new one")
    elif summary.suite_source.startswith("file"):
        review = f"edit the suite ({summary.suite_source})"
    else:
        return (f"data validation failed for '{summary.data_uri}' with {len(errs)} error(s): {listed}{more}. "
                f"Fix the data at its source (or the config setting a finding names) and run again.{where}")
    return (f"data validation failed for '{summary.data_uri}' with {len(errs)} error(s): {listed}{more}. "
            f"Fix the data; if the change is intended, {review}.{where}")


def _log_to_mlflow(tracking_uri: str, run_id: str, summary: ValidationSummary, reports: dict[str, str],
                   config: Config) -> None:
    figures = {
        "validation.errors": len(errors(summary.findings)),
        "validation.warnings": len(warnings(summary.findings)),
        "validation.checks": len(summary.findings),
        "validation.seconds": sum(summary.seconds.values()),
        **{f"validation.rows_{k}": v for k, v in summary.rows.items()},
    }
    log_step(tracking_uri, run_id, "validation", metrics=figures,
             tags={"ctpipe.validation": "passed" if summary.passed else "failed"},
             files={name: path for name, path in reports.items() if path},
             documents={"validation/summary.json": summary_json(summary)}, retry=RetryPolicy.of(config.registry))


def summary_json(summary: ValidationSummary) -> dict[str, Any]:
    """The machine-readable verdict: every finding with its severity, figures and examples."""
    return {
        "passed": summary.passed,
        "data_uri": summary.data_uri,
        "fingerprint": summary.fingerprint,
        "rows": summary.rows,
        "suite_source": summary.suite_source,
        "judged_on": summary.judged_on or "every row",
        "errors": [f.headline() for f in errors(summary.findings)],
        "warnings": [f.headline() for f in warnings(summary.findings)],
        "findings": [f.to_dict() for f in summary.findings],
        "seconds": summary.seconds,
    }
