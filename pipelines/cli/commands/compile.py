"""``ctpipe compile``: compile the pipeline to KFP IR YAML for a cluster.

    ctpipe compile --out pipeline.yaml [--config prod.yaml] [--set train.workers=8] [--image REF]
"""

from __future__ import annotations

import argparse

from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("compile", help="compile the pipeline to KFP IR YAML for a cluster")
    parser.add_argument("--out", default="pipeline.yaml", metavar="FILE", help="where to write the IR YAML (default pipeline.yaml)")
    parser.add_argument("--image", help="component image to use (default: kubernetes.image from the config)")
    add_config_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.pipelines.compile import compile_pipeline

    path = compile_pipeline(args.out, args.config, args.overrides, args.image)
    print(f"compiled the pipeline to {path.resolve()}")
    return 0
