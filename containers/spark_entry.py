"""What the Spark image's driver runs: ``python -m MODULE ARGS`` for spark-submit, which runs a file, not a module.

The validate step's SparkApplication names this file (copied into the image at /opt/ctpipe/spark_entry.py) as
its ``mainApplicationFile`` and the module with its arguments as the application's ``arguments``:

    spark-submit ... local:///opt/ctpipe/spark_entry.py ctpipe.components.steps.validate_data.spark_driver --data-uri ...

The module runs as ``__main__`` with ``sys.argv`` as ``python -m`` would give it, and its exit status (2: a user
error) is the driver's, which the Spark Operator reports and the step reads.
"""

import runpy
import sys


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        sys.exit("usage: spark_entry.py MODULE [ARGS...]  (runs the module as `python -m MODULE ARGS` would)")
    module = sys.argv[1]
    sys.argv = [module, *sys.argv[2:]]  # run_module sets argv[0] to the module's file, as `python -m` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
