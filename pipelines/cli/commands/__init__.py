"""CLI subcommands, one module each with ``register(subparsers)``, listed in ``ctpipe.pipelines.cli.main.COMMANDS``; shared options."""

from __future__ import annotations

import argparse
from pathlib import Path

from ctpipe.components.lib.errors import UserError


def add_config_args(
    parser: argparse.ArgumentParser,
    *,
    config_help: str = "YAML or JSON config file (sections as in components/lib/config/, e.g. {train: {max_steps: 200}})",
    example: str = "train.max_steps=200",
) -> None:
    """The ``--config FILE`` and repeatable ``--set KEY=VALUE`` options every config-reading command takes."""
    parser.add_argument("--config", metavar="FILE", help=config_help)
    parser.add_argument(
        "--set",
        dest="overrides",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        help=f"override one config value, e.g. --set {example} (repeatable)",
    )


def existing_registry_uri(args: argparse.Namespace, configured: str | None = None) -> str:
    """--tracking-uri, else ``configured`` (the config's ``registry.tracking_uri``, where the pipeline registers,
    as ``ctpipe run`` and ``ctpipe watch`` read it), else the SQLite registry of --home, which must exist:
    reading never creates one."""
    if args.tracking_uri:
        return args.tracking_uri
    if configured:
        return configured
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.pipelines.local.home import default_home

    home = Path(args.home) if args.home else default_home()
    if not (home / "mlflow.db").is_file():
        raise UserError(
            f"there is no MLflow registry at '{home / 'mlflow.db'}'. Run 'ctpipe run --home {home}' first, "
            "pass the --home of an earlier run, or give --tracking-uri of an MLflow server."
        )
    return local_tracking_uri(home)
