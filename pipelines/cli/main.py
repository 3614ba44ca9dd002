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

from ctpipe.components.lib.credentials import redact_text, refuse_uri_credentials
from ctpipe.components.lib.errors import RegistryRecordError, UserError
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError
from ctpipe.pipelines.cli.commands import compile as compile_command
from ctpipe.pipelines.cli.commands import (
    config,
    demo_data,
    deploy,
    gc,
    models,
    render_job,
    run,
    serve,
    submit,
    suite,
    train,
    tune,
    watch,
)

# In the order `ctpipe --help` lists them.
COMMANDS = (run, config, demo_data, compile_command, deploy, gc, models, serve, render_job, submit, suite, train, tune,
            watch)
# The options that take a URI, in any command.
URI_OPTIONS = ("data", "host", "tracking_uri")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the subcommand, and turn a user error into exit code 2."""
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:  # bare `ctpipe`: what it can do, not a usage error
        parser.print_help()
        return 0
    try:
        # Every command's URI options, before the command records or prints any of them (the commands that
        # record them check again, as do the functions they call).
        for option in URI_OPTIONS:
            refuse_uri_credentials(getattr(args, option, None), name=f"--{option.replace('_', '-')}",
                                   recorded_in="ctpipe records it (ledgers, run summaries, MLflow tags, run parameters)")
        return int(args.func(args) or 0)
    except UserError as err:
        # A message may quote a URI the user gave (a data root that does not exist): never its secrets.
        print(redact_text(f"ctpipe {args.command}: error: {err}"), file=sys.stderr)
        return 2
    except (RegistryUnavailableError, RegistryRecordError) as err:
        # A service that stayed unreachable through its retry budget, or a damaged registry record: not the
        # user's input (exit 1, as docs/errors.md says), said in one paragraph without a traceback.
        print(redact_text(f"ctpipe {args.command}: error: {err}"), file=sys.stderr)
        return 1
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
    from ctpipe import __version__

    parser = argparse.ArgumentParser(
        prog="ctpipe",
        description="Continuous training on Kubeflow Pipelines: validated data, sanity-checked training, "
        "a champion registered in MLflow only when it is measurably no worse. `ctpipe run` runs the whole "
        "pipeline locally on demo data.",
    )
    parser.add_argument("--version", action="version", version=f"ctpipe {__version__}")
    verbosity = argparse.ArgumentParser(add_help=False)
    chatter = verbosity.add_mutually_exclusive_group()
    chatter.add_argument("-q", "--quiet", dest="verbosity", action="store_const", const=-1, default=0,
                         help="print only the result and errors")
    chatter.add_argument("-v", "--verbose", dest="verbosity", action="store_const", const=1,
                         help="also print what the steps print (the run's pipeline.log)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(_WithVerbosity(sub, verbosity))
    for action in sub._choices_actions:  # `ctpipe X --help` opens with the line `ctpipe --help` lists for X
        child = sub.choices[action.dest]
        if not child.description:
            child.description = action.help[:1].upper() + action.help[1:] + "."
    return parser


class _WithVerbosity:
    """The subparsers action, giving every subcommand the shared --quiet/--verbose options."""

    def __init__(self, subparsers, verbosity: argparse.ArgumentParser) -> None:
        self._subparsers, self._verbosity = subparsers, verbosity

    def add_parser(self, name: str, **kwargs) -> argparse.ArgumentParser:
        kwargs["parents"] = [*kwargs.get("parents", []), self._verbosity]
        return self._subparsers.add_parser(name, **kwargs)


if __name__ == "__main__":
    entry()
