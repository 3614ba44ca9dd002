"""``ctpipe run``: the whole pipeline locally end to end (KFP local runner, torchrun, MLflow on SQLite).

    ctpipe run                                   # on generated demo data
    ctpipe run --data DIR --set data.label=target
    ctpipe run --task causal_lm                  # a built-in task on its own demo data (text)
    ctpipe run --runner container --image REF    # each step in the built image (ci/build_images.sh), as on a cluster

Prints one line per step, then the summary; the path of ``summary.json`` is the last line. Exit code 0
only when the pipeline succeeded, 2 for a user error (bad data, a bad ``--set``).
"""

from __future__ import annotations

import argparse

from ctpipe.components.lib.config import TRIGGERS
from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run the whole pipeline locally (KFP local runner, torchrun, MLflow on SQLite)",
        description="Run the whole pipeline locally. Each step and training rank is forked from a warm-start "
        "server that imports torch, MLflow and Great Expectations once; set CTPIPE_WARM_START=0 to start "
        "each in a fresh interpreter instead, as a pod on a cluster does.",
    )
    parser.add_argument("--data", metavar="URI", help="data root of Parquet/CSV partitions (default: generated demo data)")
    parser.add_argument("--home", metavar="DIR", help="where runs, MLflow and artifacts live (default $CTPIPE_HOME or ./.ctpipe)")
    parser.add_argument(
        "--trigger",
        default="manual",
        choices=list(TRIGGERS),
        help="why this run starts; recorded on the model (default manual)",
    )
    parser.add_argument("--task", metavar="NAME", help="a built-in task (same as --set task.name=NAME)")
    parser.add_argument(
        "--runner",
        default="subprocess",
        choices=("subprocess", "container"),
        help="subprocess: each step a process of this machine (default); container: each step in the component "
        "image through KFP's DockerRunner on podman (or $DOCKER_HOST), with a pod's user, entry point and mounts",
    )
    parser.add_argument("--image", metavar="REF",
                        help="the image of --runner container (default: kubernetes.image; ci/build_images.sh prints "
                        "the images it built)")
    add_config_args(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the pipeline locally end to end; print the summary and its path last."""
    import ctpipe
    from ctpipe.components.lib.timing import interpreter_start_time
    from ctpipe.pipelines.local.local_run import run_local
    from ctpipe.pipelines.local.run_summary import format_summary

    summary = run_local(
        process_started=interpreter_start_time(ctpipe.LOADED_AT),
        home=args.home,
        data_uri=args.data,
        config_path=args.config,
        overrides=([f"task.name={args.task}"] if args.task else []) + args.overrides,
        trigger=args.trigger,
        verbosity=args.verbosity,
        runner=args.runner,
        image=args.image,
    )
    if args.verbosity >= 0:
        print(format_summary(summary))
    else:  # --quiet: the outcome in one line, then the path
        error = (summary.get("error") or {}).get("message") if summary["status"] != "succeeded" else None
        print(f"ctpipe run: {summary['status']}" + (f": {error}" if error else ""))
    print(summary["summary_path"])
    if summary["status"] == "succeeded":
        return 0
    return 2 if (summary.get("error") or {}).get("user_error") else 1
