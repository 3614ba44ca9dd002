"""``ctpipe demo-data``: write the demo dataset as daily Parquet partitions (optionally with drift).

    ctpipe demo-data --out data --days 14 --drift-from-day 10
    ctpipe demo-data --task causal_lm --out text-data --days 4   # real text: CPython's help topics
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ctpipe.components.lib.errors import UserError


def register(subparsers) -> None:
    parser = subparsers.add_parser("demo-data", help="write the demo dataset as daily Parquet partitions")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write date=YYYY-MM-DD/part-0.parquet partitions")
    parser.add_argument("--days", type=int, default=7, help="number of daily partitions (default 7)")
    parser.add_argument("--rows-per-day", type=int, default=1000, help="rows in each partition (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed; the same seed writes the same data (default 0)")
    parser.add_argument("--drift-from-day", type=int, default=None, metavar="D", help="shift the features from day D on")
    parser.add_argument("--task", default=None, metavar="NAME",
                        help="write the demo data of this built-in task (e.g. causal_lm); default: the tabular demo")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.data.demo import write_demo_data

    if args.days < 1 or args.rows_per_day < 1:
        raise UserError("--days and --rows-per-day must be at least 1")
    if args.drift_from_day is not None and not 0 <= args.drift_from_day < args.days:
        raise UserError(f"--drift-from-day must be in [0, {args.days - 1}] (a day index within --days)")
    if args.task is not None:
        return _run_task_demo(args)
    paths = write_demo_data(
        args.out, days=args.days, rows_per_day=args.rows_per_day, seed=args.seed, drift_from_day=args.drift_from_day
    )
    print(f"wrote {len(paths)} partitions x {args.rows_per_day} rows under {Path(args.out).resolve()}")
    return 0


def _run_task_demo(args: argparse.Namespace) -> int:
    """A task's own demo data: the task's ``demo.write_data(out, days=, drift_from_day=)``."""
    from ctpipe.components.tasks import load_task

    task = load_task({"name": args.task, "entrypoint": None, "options": {}})
    if task.demo is None:
        raise UserError(f"task {args.task!r} has no demo data of its own; leave out --task for the tabular demo")
    paths = task.demo.write_data(args.out, days=args.days, drift_from_day=args.drift_from_day)
    print(f"wrote {len(paths)} partitions of {args.task} demo data under {Path(args.out).resolve()}")
    return 0
