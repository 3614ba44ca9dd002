"""``ctpipe render-job``: print the job the train step would submit (under train.backend=auto both kinds), and with
validation.engine=spark the validate step's SparkApplication first, after the same validation.

    ctpipe render-job --config prod.yaml --set train.workers=8 --set validation.engine=spark
"""

from __future__ import annotations

import argparse

from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "render-job", allow_abbrev=False, help="print the job YAML the train step would submit (train.backend=auto: the TrainJob and the PyTorchJob it chooses between) and, with validation.engine=spark, the validate step's SparkApplication; validated, no cluster needed"
    )
    add_config_args(parser, example="train.workers=4")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.cluster_job import render_pytorchjob_yaml

    # The defaults `ctpipe compile` starts from, so the same flags show the job the compiled pipeline submits
    # (train.backend=auto, MLflow credentials from the manifests' secret), not one built on `ctpipe run`'s defaults.
    config = resolve_config(file=args.config, settings=args.overrides, target="cluster", check_target=False)
    print(render_pytorchjob_yaml(config), end="")
    return 0
