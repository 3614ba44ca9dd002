"""The `ctpipe` command.

    ctpipe run                      # the whole pipeline locally on generated demo data
    ctpipe run --data DIR --set data.label=target
    ctpipe demo-data --out DIR --days 7
    ctpipe compile --out pipeline.yaml

Subcommands beyond these live in ``pipelines/commands/`` (one module each).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import pkgutil
import sys
from pathlib import Path

from components.errors import UserError
from pipelines.commands import add_config_args


def cmd_run(args: argparse.Namespace) -> int:
    """Run the pipeline locally end to end; print the summary and its path last."""
    from pipelines.local_run import format_summary, run_local

    summary = run_local(
        home=args.home,
        data_uri=args.data,
        config_path=args.config,
        overrides=args.overrides,
        trigger=args.trigger,
        quiet=False,
    )
    print(format_summary(summary))
    print(summary["summary_path"])
    if summary["status"] == "succeeded":
        return 0
    return 2 if (summary.get("error") or {}).get("user_error") else 1


def cmd_demo_data(args: argparse.Namespace) -> int:
    from components.data.demo import write_demo_data

    if args.days < 1 or args.rows_per_day < 1:
        raise UserError("--days and --rows-per-day must be at least 1")
    if args.drift_from_day is not None and not 0 <= args.drift_from_day < args.days:
        raise UserError(f"--drift-from-day must be in [0, {args.days - 1}] (a day index within --days)")
    paths = write_demo_data(
        args.out, days=args.days, rows_per_day=args.rows_per_day, seed=args.seed, drift_from_day=args.drift_from_day
    )
    print(f"wrote {len(paths)} partitions x {args.rows_per_day} rows under {Path(args.out).resolve()}")
    return 0


def compile_pipeline(out: str | Path, config_path: str | None, overrides: list[str], image: str | None) -> Path:
    """Compile the pipeline for a cluster with the config (over the cluster defaults) as its default; return the
    YAML path. A config that would train in the step pod or give MLflow no credentials is refused."""
    import yaml
    from kfp import compiler

    from components.kfp_support import COMPONENT_IMAGE
    from pipelines.cluster_config import load_cluster_config
    from pipelines.continuous_training import DEFAULT_CLUSTER_TRACKING_URI, build_pipeline

    config = load_cluster_config(config_path, overrides)
    if image:  # --image: the steps' image, also recorded in the compiled config
        config.kubernetes = dataclasses.replace(config.kubernetes, image=image)
    uri = config.registry.tracking_uri or ""
    out_path = Path(out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    pipeline = build_pipeline(
        config.kubernetes,
        default_config_json=config.to_json(),
        default_tracking_uri=uri or DEFAULT_CLUSTER_TRACKING_URI,
    )
    compiler.Compiler().compile(pipeline, str(out_path))
    target_image = config.kubernetes.image
    if target_image != COMPONENT_IMAGE:
        docs = list(yaml.safe_load_all(out_path.read_text()))
        for executor in docs[0]["deploymentSpec"]["executors"].values():
            if executor.get("container", {}).get("image") == COMPONENT_IMAGE:
                executor["container"]["image"] = target_image
        out_path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return out_path


def cmd_compile(args: argparse.Namespace) -> int:
    path = compile_pipeline(args.out, args.config, args.overrides, args.image)
    print(f"compiled the pipeline to {path.resolve()}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctpipe", description="Continuous training on Kubeflow Pipelines.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser("run", help="run the whole pipeline locally (KFP local runner, torchrun, MLflow on SQLite)")
    run.add_argument("--data", metavar="URI", help="data root of Parquet/CSV partitions (default: generated demo data)")
    run.add_argument("--home", metavar="DIR", help="where runs, MLflow and artifacts live (default $CTPIPE_HOME or ./.ctpipe)")
    run.add_argument(
        "--trigger",
        default="manual",
        choices=["manual", "schedule", "new_data", "drift", "ci"],
        help="why this run starts; recorded on the model (default manual)",
    )
    add_config_args(run)
    run.set_defaults(func=cmd_run)

    demo = sub.add_parser("demo-data", help="write the demo dataset as daily Parquet partitions")
    demo.add_argument("--out", required=True, metavar="DIR", help="where to write date=YYYY-MM-DD/part-0.parquet partitions")
    demo.add_argument("--days", type=int, default=7, help="number of daily partitions (default 7)")
    demo.add_argument("--rows-per-day", type=int, default=1000, help="rows in each partition (default 1000)")
    demo.add_argument("--seed", type=int, default=0, help="random seed; the same seed writes the same data (default 0)")
    demo.add_argument("--drift-from-day", type=int, default=None, metavar="D", help="shift the features from day D on")
    demo.set_defaults(func=cmd_demo_data)

    comp = sub.add_parser("compile", help="compile the pipeline to KFP IR YAML for a cluster")
    comp.add_argument("--out", default="pipeline.yaml", metavar="FILE", help="where to write the IR YAML (default pipeline.yaml)")
    comp.add_argument("--image", help="component image to use (default: kubernetes.image from the config)")
    add_config_args(comp)
    comp.set_defaults(func=cmd_compile)

    import pipelines.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"pipelines.commands.{info.name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        print(f"ctpipe {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctpipe: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
