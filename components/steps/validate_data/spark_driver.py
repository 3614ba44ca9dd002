"""The Spark application's main file: validate_data on the SparkSession spark-submit provides.

    python -m ctpipe.components.steps.validate_data.spark_driver --data-uri URI --config-json JSON \\
        --snapshot DIR --data-docs PATH --report PATH --result PATH

A SparkApplication runs this as its ``mainApplicationFile`` with these arguments (the cluster half of the
validate step submits and follows it). It runs the Spark engine's validation (``validate.validate_data`` with
``validation.engine=spark``) inside ``SparkSession.builder.getOrCreate()``: master, executors and resources are the
application's. It writes the snapshot (with ``validation.json``, the ``ValidationVerdict`` handoff), the Data
Docs and the report, and then, always, a small JSON record at ``--result`` (``DriverResult``): what the validate
step emits. Exit status: 0 passed, 2 a user error (bad data, a bad setting: a restart repeats it), 1 otherwise.
No MLflow here: the step that submitted the application logs to the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text

RESULT_FORMAT = 1


@dataclass
class DriverResult:
    """The record at ``--result``."""

    status: str  # "passed", "failed" (the data or a setting: exit 2) or "error" (anything else: exit 1)
    exit_code: int
    message: str = ""
    fingerprint: str = ""
    rows: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    failing_checks: list[dict[str, Any]] = field(default_factory=list)
    suite_source: str = ""
    snapshot: str = ""
    format_version: int = RESULT_FORMAT


def _failing(report_json: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"check": f.get("check"), "column": f.get("column"), "severity": f.get("severity"),
             "message": f.get("message")} for f in report_json.get("findings", []) if not f.get("passed", True)]


def run(args: argparse.Namespace) -> DriverResult:
    """Validate on the application's session and describe the outcome (never raises)."""
    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.errors import ConfigError, UserError

    try:
        try:
            settings = json.loads(args.config_json)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--config-json is not JSON ({err}); pass the run's resolved config, Config.to_json()") from None
        config = Config.from_dict(settings)
        config = dataclasses.replace(config, validation=dataclasses.replace(config.validation, engine="spark"))
        from pyspark.sql import SparkSession

        SparkSession.builder.getOrCreate()  # spark-submit's session: the engine computes in it, and leaves it running
        from ctpipe.components.steps.validate_data.validate import validate_data

        result = validate_data(args.data_uri, config, snapshot_dir=args.snapshot, data_docs_path=args.data_docs,
                               report_path=args.report, tracking_uri="", mlflow_run_id="")
        return DriverResult("passed", 0, fingerprint=result.fingerprint, rows=result.rows, warnings=result.warnings,
                            failing_checks=_failing({"findings": [f.to_dict() for f in result.findings]}),
                            suite_source=result.suite_source, snapshot=args.snapshot)
    except UserError as err:  # DataValidationError and ConfigError too: the data or a setting, exit 2
        return DriverResult("failed", 2, message=str(err), **_reported(getattr(err, "summary", None) or {}))
    except Exception as err:  # infrastructure: the step may retry
        traceback.print_exc()
        return DriverResult("error", 1, message=f"{type(err).__name__}: {err}")


def _reported(doc: dict[str, Any]) -> dict[str, Any]:
    """What a failed validation still found (``validate_data``'s summary on its error)."""
    return {"fingerprint": doc.get("fingerprint", ""), "rows": doc.get("rows", {}), "warnings": doc.get("warnings", []),
            "failing_checks": _failing(doc), "suite_source": doc.get("suite_source", "")}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m ctpipe.components.steps.validate_data.spark_driver",
                                     description=__doc__.splitlines()[0])
    for name, what in (("--data-uri", "the data root (any fsspec URL the executors can read)"),
                       ("--config-json", "the run's resolved config as JSON (Config.to_json)"),
                       ("--snapshot", "the snapshot directory to write (shared with the training pods)"),
                       ("--data-docs", "the Data Docs HTML path"), ("--report", "the Markdown report path"),
                       ("--result", "where to write the JSON result record")):
        parser.add_argument(name, required=True, help=what)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = run(args)
    Path(args.result).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.result, json.dumps(dataclasses.asdict(result), indent=2))
    print(f"validate_data on Spark: {result.status}" + (f": {result.message}" if result.message else ""),
          file=sys.stderr)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
