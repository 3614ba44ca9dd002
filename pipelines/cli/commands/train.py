"""`ctpipe train`: run the training step alone with the local launcher.

    ctpipe train --data DATA --out DIR [--config FILE] [--set train.max_steps=100 ...] [--tracking-uri URI]

Run again with the same --out and it resumes from the latest complete checkpoint, with the same data,
split (data.key, split_salt, val_fraction, test_fraction) and training settings; other ones are refused,
naming each: pass a new --out to start afresh.

FSDP2 units: --set train.fsdp_unit_min_params=N (default 1000000) makes a model block with at least N
parameters its own unit; smaller consecutive blocks are grouped, a small rest goes to the root (the
default MLP: root only); 0 shards every block on its own.
"""

from __future__ import annotations

import argparse
import json
import sys

from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train alone on a data root (snapshot, checkpoints, train_summary.json under --out; resumes)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, metavar="URI", help="data root of Parquet/CSV partitions")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory; reused to resume")
    parser.add_argument(
        "--tracking-uri",
        metavar="URI",
        default="",
        help="MLflow tracking URI for params and metrics, e.g. sqlite:///DIR/mlflow.db (default: none; "
        "metrics are in DIR/checkpoints/index.json and DIR/train_summary.json)",
    )
    add_config_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.errors import TrainingError
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.local.train_alone import SUMMARY_FILE, train_standalone

    config = resolve_config(file=args.config, settings=args.overrides)
    try:
        summary = train_standalone(args.data, args.out, config, tracking_uri=args.tracking_uri or None)
    except TrainingError as err:
        # The launcher's message already leads with the failing rank's error; no traceback needed.
        print(f"ctpipe train: training failed: {err}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                k: summary[k]
                for k in (
                    "steps",
                    "best_checkpoint",
                    "world_size",
                    "samples_per_second",
                    "mfu",
                    "final_weights_sha256",
                )
            },
            indent=2,
        )
    )
    print(f"{args.out}/{SUMMARY_FILE}")
    return 0
