"""`ctpipe gc`: apply the retention policy (``retention.*``) to a ctpipe home and its MLflow runs.

    ctpipe gc --home DIR [--dry-run] [--set retention.keep_last_runs=20] [--config FILE]

Deregisters the versions outside ``retention.keep_versions`` / ``retention.keep_champions`` (never an aliased
one, one in the rollback stack or a running one); keeps the runs of every registered version (so the
champion's lineage), the newest ``retention.keep_last_runs`` runs and failed runs younger than
``retention.keep_failed_days``; deletes the checkpoints of finished runs (the exported model stays) and
everything of older runs, for good on a local SQLite store; marks the MLflow runs of killed runs KILLED. Prints one JSON line: what was (with --dry-run: would be) deleted. The watcher's
CronJob runs it after each check (manifests/base/watcher-cronjob.yaml). See docs/retention.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ctpipe.pipelines.cli.commands import add_config_args, existing_registry_uri


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "gc", help="delete old runs, checkpoints and MLflow runs under the retention policy",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--home", metavar="DIR", help="ctpipe home (default $CTPIPE_HOME or ./.ctpipe)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default registry.tracking_uri, else the --home's SQLite)")
    parser.add_argument("--dry-run", action="store_true", help="print what would be deleted; change nothing")
    add_config_args(parser, config_help="the pipeline's config file (its retention and registry sections)",
                    example="retention.keep_last_runs=20")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.tracking import RegistryUnavailableError, bounded_mlflow_http
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.local.home import default_home
    from ctpipe.pipelines.retention.gc import collect_garbage

    config = resolve_config(file=args.config, settings=args.overrides)
    home = Path(args.home) if args.home else default_home()
    uri = existing_registry_uri(args, config.registry.tracking_uri)
    try:
        with bounded_mlflow_http():
            report = collect_garbage(home, config.retention, config.registry, uri, dry_run=args.dry_run)
            if not args.dry_run:
                complete_champion_record(config.registry, uri)
    except RegistryUnavailableError as err:
        print(f"ctpipe gc: error: {err}", file=sys.stderr)
        return 1
    print(json.dumps(report.to_dict()))
    return 0


def complete_champion_record(config, uri: str) -> None:
    """A promotion cut off after its alias moved left its history short: complete it (under the lock)."""
    from ctpipe.components.lib.registry.registry import Registry

    registry = Registry(uri, config)
    if registry.alias_version(config.champion_alias) is not None:
        registry.complete_champion_record()
