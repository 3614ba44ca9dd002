"""The Spark application's main file: validate_data on the SparkSession spark-submit provides.

    python -m ctpipe.components.steps.validate_data.spark_driver --data-uri URI --config-json JSON \\
        --snapshot DIR --data-docs PATH --report PATH --result PATH

A SparkApplication runs this as its ``mainApplicationFile`` with these arguments (the cluster half of the
validate step, ``on_spark_cluster.py``, submits and follows it). It runs the Spark engine's validation
(``validate.validate_data`` with ``validation.engine=spark``) inside ``SparkSession.builder.getOrCreate()``: master,
executors and resources are the application's. It writes the snapshot (with ``validation.json``), the Data Docs
and the report, and at ``--result`` the verdict the step reports from: a ``ValidationVerdict``
(``components/lib/handoffs.py``), passed or failed with every finding. Exit status: 0 passed; 2 a user error (a
failed verdict, or a bad setting before any verdict, which writes no record): a restart repeats it; 1 anything
else (no record). No MLflow here: the step that submitted the application logs to the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import dataclass, replace

from ctpipe.components.lib.handoffs import ValidationVerdict, write_record


@dataclass(frozen=True)
class DriverOutcome:
    """The exit status, the verdict to record (None: no verdict was reached) and what to print."""

    exit_code: int
    verdict: ValidationVerdict | None
    message: str = ""


def run(args: argparse.Namespace) -> DriverOutcome:
    """Validate on the application's session and describe the outcome (never raises)."""
    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.errors import ConfigError, DataValidationError, UserError
    from ctpipe.components.lib.handoffs import VALIDATION_FILE, read_verdict

    try:
        try:
            settings = json.loads(args.config_json)
        except json.JSONDecodeError as err:
            raise ConfigError(f"--config-json is not JSON ({err}); pass the run's resolved config, Config.to_json()") from None
        config = Config.from_dict(settings)
        config = replace(config, validation=replace(config.validation, engine="spark"))
        from pyspark.sql import SparkSession

        SparkSession.builder.getOrCreate()  # spark-submit's session: the engine computes in it, and leaves it running
        from ctpipe.components.steps.validate_data.validate import validate_data

        validate_data(args.data_uri, config, snapshot_dir=args.snapshot, data_docs_path=args.data_docs,
                      report_path=args.report, tracking_uri="", mlflow_run_id="")
        return DriverOutcome(0, read_verdict(f"{args.snapshot}/{VALIDATION_FILE}"), "passed")
    except DataValidationError as err:  # the data failed its checks: the verdict names every finding
        summary = getattr(err, "summary", None)
        return DriverOutcome(2, ValidationVerdict(**summary) if summary else None, str(err))
    except UserError as err:  # a bad setting or argument: no verdict, and a restart would repeat it
        return DriverOutcome(2, None, str(err))
    except Exception as err:  # infrastructure: the step may create the application again
        traceback.print_exc()
        return DriverOutcome(1, None, f"{type(err).__name__}: {err}")


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
    outcome = run(args)
    if outcome.verdict is not None:
        write_record(args.result, outcome.verdict)  # whole or not at all: the step reads it after the driver exits
    print(f"validate_data on Spark: {outcome.message}", file=sys.stderr)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
