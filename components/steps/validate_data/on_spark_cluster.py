"""validate_data on a cluster with ``validation.engine: spark``: the validation runs as a SparkApplication.

``validate_on_spark_cluster`` is what the KFP step calls instead of ``validate.validate_data`` when
``runs_on_spark_cluster(data_uri, config)``: it hands the driver command to the launcher (``spark_launcher.py``), reads back
the result record the driver wrote (a ``ValidationVerdict``, ``components/lib/handoffs.py``: the verdict, row
counts, the data's fingerprint, every finding) and gives the step the same outputs as a local validation: the
snapshot, Data Docs and report (written by the driver, copied back from the shared volume), the same MLflow
metrics, tags and files, and the same ``DataValidationError`` when an error-severity check fails. The Spark pods
hold no MLflow credentials: the step logs, from its own pod.

The driver's contract (its module is the Spark engine's):
``python -m MODULE --data-uri URI --config-json JSON --snapshot DIR --data-docs PATH --report PATH --result PATH``;
exit status 2 for a user error (failed validation, bad data or config), 1 otherwise.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.lib.handoffs import ValidationVerdict, read_verdict
from ctpipe.components.lib.kube.sparkapplication import SparkLaunch
from ctpipe.components.steps.validate_data.engines import chosen_engine
from ctpipe.components.steps.validate_data.findings import Finding
from ctpipe.components.steps.validate_data.report import ValidationSummary
from ctpipe.components.steps.validate_data.validate import ValidationResult, _error_message, _log_to_mlflow

if TYPE_CHECKING:  # the launcher brings the kubernetes client: imported only when an application runs
    from ctpipe.components.steps.validate_data.spark_launcher import SparkApplicationLauncher

DRIVER_MODULE = "ctpipe.components.steps.validate_data.spark_driver"
RESULT_FILE = "validation_result.json"


def runs_on_spark_cluster(data_uri: str, config: Config) -> bool:
    """A SparkApplication: in a cluster pipeline (``train.backend`` not local) with ``validation.engine: spark``, or
    ``auto`` over ``validation.spark_min_rows`` rows (counted in the Parquet footers, as the local step does)."""
    if config.train.backend == "local" or config.validation.engine == "local":
        return False
    return chosen_engine(data_uri, config) == "spark"


def driver_command(data_uri: str, config: Config, *, snapshot_dir: str, data_docs_path: str, report_path: str,
                   result_path: str, module: str = DRIVER_MODULE) -> list[str]:
    """The argv the driver runs (the module's contract above)."""
    return ["python", "-m", module, "--data-uri", data_uri, "--config-json", config.to_json(),
            "--snapshot", snapshot_dir, "--data-docs", data_docs_path, "--report", report_path, "--result", result_path]


def build_spark_launch(data_uri: str, config: Config, *, snapshot_dir: str, data_docs_path: str, report_path: str,
                       result_path: str, launch_name: str, module: str = DRIVER_MODULE) -> SparkLaunch:
    """The application the step hands its launcher; a plain function (``ctpipe render-job`` calls it)."""
    command = driver_command(data_uri, config, snapshot_dir=snapshot_dir, data_docs_path=data_docs_path,
                             report_path=report_path, result_path=result_path, module=module)
    return SparkLaunch(job_name=launch_name, command=command, env={"MLFLOW_DISABLE_TELEMETRY": "true"},
                       deadline_seconds=config.kubernetes.spark_deadline_seconds)


def check_data_reachable(data_uri: str, config: Config) -> None:
    """The Spark pods mount only the shared volume: the data must be under it, or at a URL they can reach."""
    scheme = urlparse(data_uri).scheme
    if scheme and scheme != "file" and len(scheme) > 1:  # s3://, gs://, abfss://, ... (a drive letter is no scheme)
        return
    path = urlparse(data_uri).path if scheme == "file" else data_uri
    mount = Path(config.kubernetes.shared_mount_path)
    if config.kubernetes.shared_pvc and Path(path).is_absolute() and (Path(path) == mount or mount in Path(path).parents):
        return
    raise UserError(
        f"data URI {data_uri!r} is not where the Spark pods can read it: they mount only the shared volume "
        f"(kubernetes.shared_pvc={config.kubernetes.shared_pvc!r} at {str(mount)!r}). Put the data under "
        f"{str(mount)!r} (e.g. {str(mount / 'data')!r}), give an object-store URL (s3://, gs://, ...), or set "
        "validation.engine=local."
    )


def validate_on_spark_cluster(
    data_uri: str, config: Config, *, snapshot_dir: str, data_docs_path: str, report_path: str, tracking_uri: str,
    mlflow_run_id: str, launch_name: str | None = None, module: str | None = None,
    launcher: SparkApplicationLauncher | None = None,
) -> ValidationResult:
    """Validate ``data_uri`` in a SparkApplication and write the snapshot; raise DataValidationError on errors.

    ``launch_name`` (default ``mlflow_run_id``) names the application: a retried step re-attaches to it.
    ``module`` (default ``DRIVER_MODULE``) is the driver module the application runs.
    """
    from ctpipe.components.steps.validate_data.spark_launcher import (
        SparkApplicationError,
        SparkApplicationLauncher,
    )

    started = time.perf_counter()
    check_data_reachable(data_uri, config)
    # Step-local like the outputs: staged onto the shared volume, emptied before each attempt, copied back after.
    result_path = str(Path(tempfile.mkdtemp(prefix="ctpipe-spark-")) / RESULT_FILE)
    launch = build_spark_launch(data_uri, config, snapshot_dir=snapshot_dir, data_docs_path=data_docs_path,
                                report_path=report_path, result_path=result_path,
                                launch_name=launch_name or mlflow_run_id, module=module or DRIVER_MODULE)
    outcome = (launcher or SparkApplicationLauncher(config)).run(launch)
    if not Path(result_path).is_file():
        if not outcome.succeeded:  # exit 2 before any verdict: bad config or data the driver refused at once
            raise UserError(f"the validation driver stopped with a user error before it judged the data:\n{outcome.message}")
        raise SparkApplicationError(f"{outcome.message}, but its driver wrote no result record ({RESULT_FILE})")
    verdict = read_verdict(result_path)
    summary = _summary(verdict)
    reports = {"validation/data_docs.html": data_docs_path, "validation/validation_report.md": report_path,
               "validation/suite.json": str(Path(snapshot_dir) / "suite.json")}
    _log_to_mlflow(tracking_uri, mlflow_run_id, summary, reports, config)
    if not verdict.passed:
        raise DataValidationError(_error_message(summary, report_path))
    return ValidationResult(
        fingerprint=verdict.fingerprint,
        rows=dict(verdict.rows),
        warnings=list(verdict.warnings),
        suite_source=verdict.suite_source,
        seconds=time.perf_counter() - started,
        findings=summary.findings,
    )


def _summary(verdict: ValidationVerdict) -> ValidationSummary:
    """The verdict as the summary a local validation reports from (the same MLflow figures and error message)."""
    findings = [Finding(**f) for f in verdict.findings]
    if not verdict.passed and not any(f.is_error for f in findings):  # a failed verdict always names its errors
        findings += [Finding(check="spark_driver", passed=False, message=e) for e in verdict.errors or ["failed"]]
    return ValidationSummary(
        data_uri=verdict.data_uri, fingerprint=verdict.fingerprint, rows=dict(verdict.rows),
        suite_source=verdict.suite_source, findings=findings, seconds=dict(verdict.seconds),
        judged_on="" if verdict.judged_on == "every row" else verdict.judged_on,
    )
