"""``ctpipe watch``: start runs on new data and on drift, once per data version (the CronJob's command).

    ctpipe watch --data DATA --home .ctpipe --once --dry-run     # decide only; --json for one JSON line
    ctpipe watch --data s3://bucket/data --host https://kfp.example.com --once
    ctpipe watch --data DATA --interval 300                      # keep watching, local runs
    ctpipe watch --status [--json]                               # data versions and their attempts
    ctpipe watch --data DATA --once --alert                      # exit 1 on a stale champion, a stopped feed, failing runs
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ctpipe.pipelines.cli.commands import add_config_args
from ctpipe.pipelines.cli.commands.deploy import add_kfp_args


def register(subparsers) -> None:
    parser = subparsers.add_parser("watch", allow_abbrev=False, help="start a run when new data lands or the data drifts (once per data version)")
    parser.add_argument("--data", metavar="URI", help="data root to watch (local path or fsspec URL); required unless --status")
    parser.add_argument("--home", metavar="DIR", help="ctpipe home with the champion and the watcher's ledger (default $CTPIPE_HOME or ./.ctpipe)")
    parser.add_argument("--once", action="store_true", help="check once and exit (what the CronJob runs)")
    parser.add_argument("--interval", type=float, metavar="S", help="seconds between checks (default watch.interval_seconds)")
    parser.add_argument("--dry-run", action="store_true", help="decide and report, start nothing")
    parser.add_argument("--labels", metavar="URI", help="label partitions (data.key and data.label, or a language model's documents: data.key and its text; date=YYYY-MM-DD) to join with serving.prediction_log: the decay trigger")
    parser.add_argument("--alert", action="store_true", help="with --once: exit 1 when the champion is stale, the data feed stopped or the last runs all failed (watch.max_* limits)")
    parser.add_argument("--status", action="store_true", help="list the data versions in the ledger with their attempts and outcomes, then exit")
    parser.add_argument("--json", action="store_true", help="print JSON for programs: one object per check (with --status: one object instead of a table)")
    parser.add_argument("--local", action="store_true", help="start runs locally with 'ctpipe submit' (the default without --host)")
    parser.add_argument("--wait", action="store_true", help="with a local run, wait for it to finish")
    parser.add_argument("--tracking-uri", metavar="URI", help="MLflow tracking/registry URI (default registry.tracking_uri, else the home's SQLite)")
    add_config_args(parser, config_help="YAML/JSON config (watch thresholds, registry, runs)", example="watch.psi_threshold=0.3")
    add_kfp_args(parser, host_required=False)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.credentials import refuse_uri_credentials
    from ctpipe.components.lib.errors import UserError
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.components.run_config.resolve import resolve_layers
    from ctpipe.pipelines.triggers.watch import check_once, watch_loop

    # Same default as 'ctpipe run', so the watcher finds the champion that run registered.
    home = Path(args.home or os.environ.get("CTPIPE_HOME") or ".ctpipe")
    if args.status:
        return _status(home, args.json)
    if not args.data:
        raise UserError("--data URI is required: the data root to watch (or use --status to list what was started).")
    # First, before the data is listed or anything is written to the home (ledger, hash cache) or printed.
    for name, uri in (("--data", args.data), ("--tracking-uri", args.tracking_uri), ("--host", args.host),
                      ("--labels", args.labels)):
        refuse_uri_credentials(uri, name=name, recorded_in="the watcher records it in its ledger and hash cache "
                               "and passes it to every run it starts")
    if args.host and args.local:
        raise UserError("--host and --local exclude each other: start runs on KFP (--host URL) or locally (--local).")
    # Runs on KFP get config_json over the cluster defaults the pipeline was compiled with (as submit does).
    resolved = resolve_layers(file=args.config, settings=args.overrides, target="cluster" if args.host else "local")
    config = resolved.config
    data_uri = args.data if "://" in args.data else str(Path(args.data).resolve())
    tracking_uri = args.tracking_uri or config.registry.tracking_uri or local_tracking_uri(home)
    # A dry run uses the starter only to read whether runs are still going (it starts and stops nothing).
    starter = _starter(args, config, home)
    check_args = dict(data_uri=data_uri, home=home, config=config, tracking_uri=tracking_uri, starter=starter, dry_run=args.dry_run,
                      from_champion=not_given(resolved), labels_uri=args.labels)
    if args.alert and not args.once:
        raise UserError("--alert needs --once: it sets the exit code of one check (a loop writes the same figures to "
                        "HOME/watch/health.json at every check)")
    if args.once:
        decision = check_once(**check_args)
        print(decision.to_line() if args.json else decision.to_text())
        return 1 if args.alert and decision.health and decision.health["alert"] else 0
    interval = args.interval if args.interval is not None else config.watch.interval_seconds
    if interval <= 0:
        raise UserError(f"--interval {interval} must be > 0 seconds")
    watch_loop(interval=interval, as_json=args.json, **check_args)
    return 0


# What a run on new data takes from the config the champion was trained with, unless the user gives it: the
# demo home's champion was trained with data.key=customer_id, which no default says (issue 47).
FROM_CHAMPION = ("data.key", "data.label")


def not_given(resolved) -> tuple[str, ...]:
    """Those of ``FROM_CHAMPION`` that neither ``--config`` nor ``--set`` gives (``resolved``: a ResolvedConfig)."""
    return tuple(p for p in FROM_CHAMPION if not resolved.origin_of(p).startswith(("--set", "file")))


def _status(home: Path, as_json: bool) -> int:
    import json

    from ctpipe.pipelines.triggers.status import format_versions, list_versions

    versions = list_versions(home)
    print(json.dumps({"home": str(home), "versions": versions}) if as_json else format_versions(versions))
    return 0


def _starter(args: argparse.Namespace, config, home: Path):
    if args.host:
        from ctpipe.components.lib.tracking import RetryPolicy
        from ctpipe.pipelines.deploy import upload as deploy
        from ctpipe.pipelines.triggers.start import KfpStarter

        client = deploy.connect(args.host, namespace=args.namespace, token_file=args.token_file)
        return KfpStarter(
            client,
            experiment=args.experiment,
            namespace=args.namespace,
            service_account=args.service_account or config.kubernetes.service_account,
            overrides=args.overrides,
            config_json=config.to_json() if args.config else None,
            tracking_uri=args.tracking_uri or config.registry.tracking_uri,
            mlflow_experiment=config.registry.experiment,
            retry=RetryPolicy.of(config.registry),
        )
    from ctpipe.pipelines.triggers.start import LocalStarter

    return LocalStarter(home, config_path=args.config, overrides=args.overrides, wait=args.wait)
