"""A stand-in for the Spark engine's driver module in the cluster tests: its contract only (the arguments, the
outputs, the result record, the exit status), never Spark. The stand-in operator (spark_operator.py) runs it as
the driver's application; the tests pass its module name where the step names the real driver.

    python -m tests.fakes.spark_driver_stub --data-uri URI --config-json JSON --snapshot DIR --data-docs PATH \
        --report PATH --result PATH

``CTPIPE_TEST_SPARK_DRIVER`` picks what it does: ``pass`` (outputs and a passing verdict), ``fail`` (reports and a
failing verdict, exit 2), ``refuse`` (exit 2 before any verdict), ``crash`` (exit 1), ``crash-once`` (exit 1 the
first time in this application's folder on the shared volume, then ``pass``), ``hang`` (never ends), ``silent``
(exit 0 without a result record), ``local``
(ctpipe's local engine on the data: the real snapshot, Data Docs, report and verdict).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

from ctpipe.components.lib.handoffs import ValidationVerdict, write_record

MODE_ENV = "CTPIPE_TEST_SPARK_DRIVER"


def _verdict(args: argparse.Namespace, *, passed: bool, errors: list[str]) -> ValidationVerdict:
    findings = [{"check": "stub_check", "passed": passed, "severity": "error", "column": "x",
                 "message": errors[0] if errors else "all good", "source": "data"}]
    return ValidationVerdict(passed=passed, data_uri=args.data_uri, fingerprint="stub-fingerprint",
                             rows={"train": 8, "val": 1, "test": 1}, errors=errors,
                             warnings=["stub warning"], findings=findings, suite_source="profiled (stub)")


def _write_reports(args: argparse.Namespace, text: str) -> None:
    Path(args.data_docs).parent.mkdir(parents=True, exist_ok=True)
    Path(args.data_docs).write_text(f"<html><body>{text}</body></html>")
    Path(args.report).write_text(f"# Validation\n\n{text}\n")


def _local(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.errors import DataValidationError
    from ctpipe.components.lib.handoffs import VALIDATION_FILE, record_from
    from ctpipe.components.steps.validate_data.validate import validate_data

    config = Config.from_json(args.config_json)
    # The local engine, whatever the run asked: this stand-in checks the contract, not Spark (test_spark_driver.py).
    config = replace(config, validation=replace(config.validation, engine="local"))
    try:
        validate_data(args.data_uri, config, snapshot_dir=args.snapshot,
                      data_docs_path=args.data_docs, report_path=args.report, tracking_uri="", mlflow_run_id="")
    except DataValidationError as err:
        write_record(args.result, _verdict(args, passed=False, errors=[str(err)]))
        return 2
    path = Path(args.snapshot) / VALIDATION_FILE
    write_record(args.result, record_from(ValidationVerdict, json.loads(path.read_text()), path))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    for flag in ("--data-uri", "--config-json", "--snapshot", "--data-docs", "--report", "--result"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()
    mode = os.environ.get(MODE_ENV, "pass")
    print(f"stub driver: mode {mode}, data {args.data_uri}", flush=True)
    marker = Path(args.snapshot).parent / "crashed-once"
    if mode == "crash" or (mode == "crash-once" and not marker.exists()):
        marker.touch()
        print("stub driver: lost an executor", flush=True)
        return 1
    if mode == "hang":
        time.sleep(3600)
    if mode == "silent":
        return 0
    if mode == "refuse":
        print("stub driver: config refused", flush=True)
        return 2
    if mode == "local":
        return _local(args)
    Path(args.snapshot).mkdir(parents=True, exist_ok=True)
    (Path(args.snapshot) / "train.parquet").write_bytes(b"PAR1 stub")
    passed = mode != "fail"
    _write_reports(args, "passed" if passed else "failed: column x is out of range")
    errors = [] if passed else ["column values to be between on column 'x' (observed 3 rows; expected none)"]
    write_record(args.result, _verdict(args, passed=passed, errors=errors))
    print(f"stub driver: {'passed' if passed else 'failed'}", flush=True)
    return 0 if passed else 2


if __name__ == "__main__":
    sys.exit(main())
