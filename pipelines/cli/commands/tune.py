"""`ctpipe tune`: run the hyperparameter search alone with local trials.

    ctpipe tune --data DATA --out DIR --set tune.trials=8 [--set tune.trial_steps=100] [--config FILE]

Each trial trains with its values on the snapshot's train split and is judged on its validation split (the test
split is never read). DIR gets tune_report.html (trial table, axis plots, boundary check), tune_summary.json and
tuned_config.json, the config with the chosen values: `ctpipe run --config DIR/tuned_config.json` trains and
judges it as any candidate. The search space: --set 'tune.space={train.lr: "log_uniform(1e-4, 1e-1)"}'.
"""

from __future__ import annotations

import argparse
import json
import sys

from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="search hyperparameters alone on a data root (trials as local training jobs; report under --out)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data", required=True, metavar="URI", help="data root of Parquet/CSV partitions")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory; finished trials are kept there")
    parser.add_argument("--tracking-uri", metavar="URI", default="",
                        help="MLflow tracking URI: each trial a child run with its curves (default: none)")
    add_config_args(parser, example="tune.trials=8")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.errors import TrainingError
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.local.tune_alone import REPORT_FILE, SUMMARY_FILE, tune_standalone

    config = resolve_config(file=args.config, settings=args.overrides)
    if config.train.backend != "local":  # as `ctpipe train`: the trials run on this machine
        print(f"ctpipe tune: trials run here as local processes (train.backend={config.train.backend} is the "
              "pipeline's on a cluster)", file=sys.stderr)
        config = resolve_config(file=args.config, settings=[*args.overrides, "train.backend=local"])
    try:
        summary = tune_standalone(args.data, args.out, config, tracking_uri=args.tracking_uri or None)
    except TrainingError as err:
        print(f"ctpipe tune: the search failed: {err}", file=sys.stderr)
        return 1
    chosen = summary["chosen"]
    print(json.dumps({"trials": len(summary["trials"]), "chosen": chosen.get("values"), summary["metric"]: chosen.get("objective"),
                      "configured_values": summary.get("baseline_objective"),
                      "boundary_warnings": summary["boundary_warnings"]}, indent=2))
    print(f"{args.out}/{REPORT_FILE}")
    print(f"{args.out}/{SUMMARY_FILE}")
    return 0
