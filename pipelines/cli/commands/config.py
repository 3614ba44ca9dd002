"""``ctpipe config show``: the resolved config, and for every value the layer that set it.

    ctpipe config show                                  # what `ctpipe run` on the demo data would use
    ctpipe config show --task causal_lm --set train.max_steps=200
    ctpipe config show --data DIR --config my.yaml      # your data: the task's key layer reads its columns
    ctpipe config show --cluster --json                 # what `ctpipe compile` compiles in, as JSON

The layers and their order are those of ``ctpipe.components.run_config.resolve`` (docs/configuration.md):
defaults, task, cluster, task key, demo, file, --set. Nothing is run or written.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ctpipe.pipelines.cli.commands import add_config_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "config", help="show the resolved config and the layer that set each value",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="print the resolved config with each value's layer")
    show.add_argument("--data", metavar="URI", help="the data root (default: the demo data of `ctpipe run`)")
    show.add_argument("--task", metavar="NAME", help="a built-in task (same as --set task.name=NAME)")
    show.add_argument("--cluster", action="store_true",
                      help="resolve as `ctpipe compile` does: the cluster defaults, and its checks")
    show.add_argument("--json", action="store_true", help="one JSON object: {config, origins}")
    add_config_args(show)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """``ctpipe config ACTION``: ``show`` is the one action."""
    return show_config(args)


def show_config(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ctpipe.components.run_config import resolve_layers

    settings = ([f"task.name={args.task}"] if args.task else []) + list(args.overrides)
    data_uri = args.data if args.data is None or "://" in args.data else str(Path(args.data).resolve())
    resolved = resolve_layers(file=args.config, settings=settings, target="cluster" if args.cluster else "local",
                              data_uri=data_uri, demo=args.data is None and not args.cluster)
    values = resolved.config.to_dict()
    lines = list(_flatten(values))
    if args.json:
        origins = {path: resolved.origin_of(path) for path, _ in lines}
        print(json.dumps({"config": values, "origins": origins}, sort_keys=True))
        return 0
    width = max(len(path) + len(_text(value)) for path, value in lines) + 5
    for path, value in lines:
        print(f"{path}: {_text(value)}".ljust(width) + f"# {resolved.origin_of(path)}")
    return 0


def _flatten(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``section.field`` (and ``section.mapping.key...``) paths with their values, in the config's order."""
    out = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out += _flatten(value, path + ".")
        else:
            out.append((path, value))
    return out


def _text(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
