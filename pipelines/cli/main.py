"""The `ctpipe` command: one subcommand per module of ``pipelines/cli/commands/``, listed in ``COMMANDS``.

    ctpipe run                      # the whole pipeline locally on generated demo data
    ctpipe run --data DIR --set data.label=target
    ctpipe demo-data --out DIR --days 7
    ctpipe compile --out pipeline.yaml

Each command module has ``register(subparsers)``, which adds its parser and sets ``func``; a new
command is a new module and a line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import os
import sys

from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.cli.commands import compile as compile_command
from ctpipe.pipelines.cli.commands import (
    demo_data,
    deploy,
    models,
    render_job,
    run,
    submit,
    suite,
    train,
    watch,
)

# In the order `ctpipe --help` lists them.
COMMANDS = (run, demo_data, compile_command, deploy, models, render_job, submit, suite, train, watch)


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the subcommand, and turn a user error into exit code 2."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"ctpipe {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM to `ctpipe run` (ctpipe.pipelines.local.sigterm.Terminated)
        print("ctpipe: interrupted", file=sys.stderr)
        return 128 + getattr(err, "signum", 2)


def entry() -> None:
    """The ``ctpipe`` console script: ``main``, then what the interpreter's exit does first (join the
    threads that are not daemons, run the exit handlers), then exit without tearing down the modules
    (KFP, protobuf, pandas: ~0.2 s at the end of ``ctpipe run``, measured with ``benchmarks/pipeline.py``)."""
    from ctpipe.components.lib.processes import exit_without_teardown, run_exit_handlers

    code = main()
    run_exit_handlers()
    exit_without_teardown(code)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctpipe", description="Continuous training on Kubeflow Pipelines.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


if __name__ == "__main__":
    entry()
