"""CLI subcommands: every module here exposes ``register(subparsers)``; ``pipelines.cli`` finds them."""

from __future__ import annotations

import argparse


def add_config_args(
    parser: argparse.ArgumentParser,
    *,
    config_help: str = "YAML or JSON config file (sections as in components/config.py)",
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
