"""`ctpipe models`: list, inspect, promote and roll back registered model versions.

    ctpipe models list --home DIR [--json]
    ctpipe models show VERSION --home DIR [--json]
    ctpipe models promote VERSION --reason "hotfix for ..." [--by alice] --home DIR
    ctpipe models rollback [--reason TEXT] --home DIR
    ctpipe models history [--pages N] --home DIR [--json]
    ctpipe models reproduce VERSION [--data URI] [--out DIR] [--allow-platform-drift] --home DIR [--json]
    ctpipe models reproduce VERSION --host URL [--data URI] --tracking-uri URI

Each takes the pipeline's --config FILE / --set KEY=VALUE: its registry section names the model and the
champion alias that promote and rollback move (a version registered under another alias is refused).

Promotions and rollbacks take the registry's promotion lock, are recorded on the version (manual /
rollback, who, why) and in the champion history; `promote` and `rollback` print the new champion last.
The history keeps its newest 50 moves in the registry (reasons clipped to 500 characters, with the address
of the whole text); `history --pages N` also reads N pages of older moves (25 each).

`reproduce` rebuilds a version from its lineage (snapshot, sanity gate, training with the recorded config and
seeds) into a scratch folder, registering nothing and moving no alias, and compares the weights' SHA-256 and the
test metrics with the registered ones: exit 0 bit-identical, 1 not (with the largest parameter and metric
differences), 2 refused before it started (other data, other task code, another platform: each named).
The result is recorded on the version (the latest only) and shown by `show`. With --host it starts the rebuild as
a run of the deployed pipeline with trigger `reproduce` (the recorded config, data and data fingerprint), whose
register step compares and records instead of registering. See docs/reproduce.md.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.cli.commands import add_config_args, existing_registry_uri
from ctpipe.pipelines.cli.commands.deploy import add_kfp_args, api_errors


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--home", metavar="DIR", help="ctpipe home with mlflow.db (default $CTPIPE_HOME or ./.ctpipe)"
    )
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default registry.tracking_uri, else the --home's SQLite)")
    parser.add_argument(
        "--model-name", metavar="NAME", help="registered model name (default: registry.model_name)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    # The pipeline's registry section (model name, champion alias, retries): promote must move its alias.
    add_config_args(parser, config_help="the pipeline's config file (its registry section names the model and aliases)",
                    example="registry.champion_alias=production")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list, show, promote, roll back or reproduce registered model versions",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    listing = sub.add_parser("list", help="versions with aliases, blessing, trigger and key metrics")
    _add_common(listing)
    show = sub.add_parser("show", help="everything recorded about one version")
    show.add_argument("version")
    _add_common(show)
    promote = sub.add_parser("promote", help="make VERSION the champion by hand (recorded as manual)")
    promote.add_argument("version")
    promote.add_argument("--reason", required=True, help="why (recorded on the version)")
    promote.add_argument("--by", default=None, help="who (default: the current user)")
    _add_common(promote)
    rollback = sub.add_parser("rollback", help="move the champion back to the previous champion")
    rollback.add_argument("--reason", default="rollback", help="why (recorded on the version)")
    rollback.add_argument("--by", default=None, help="who (default: the current user)")
    _add_common(rollback)
    history = sub.add_parser("history", help="the champion's moves, newest last (older ones with --pages)")
    history.add_argument("--pages", type=int, default=0, metavar="N",
                         help="also read N pages of older moves (25 moves a page; default 0)")
    _add_common(history)
    reproduce = sub.add_parser("reproduce", help="rebuild VERSION from its lineage and compare it bit for bit")
    reproduce.add_argument("version")
    reproduce.add_argument("--data", metavar="URI", default=None,
                           help="the training data (default: the URI recorded in the lineage); its files must be "
                                "the recorded ones")
    reproduce.add_argument("--out", metavar="DIR", default=None,
                           help="keep the reproduction (snapshot, checkpoints, model.pt) in this new folder "
                                "(default: a scratch folder, removed afterwards)")
    reproduce.add_argument("--allow-platform-drift", action="store_true",
                           help="rebuild even when torch, CUDA, cuDNN, device, CPU or world size differ from the "
                                "recorded ones (they are printed first), to measure how far it lands")
    # On a cluster: a pipeline run of the deployed pipeline with trigger `reproduce` does the rebuild.
    add_kfp_args(reproduce, host_required=False)
    _add_common(reproduce)
    parser.set_defaults(func=run)


def _registry(args: argparse.Namespace):
    from ctpipe.components.lib.registry.registry import Registry
    from ctpipe.components.run_config import resolve_config

    config = resolve_config(file=args.config, settings=args.overrides).registry
    if args.model_name:
        config.model_name = args.model_name
    return Registry(existing_registry_uri(args, config.tracking_uri), config)


def _print_table(rows: list[dict]) -> None:
    if not rows:
        print("no registered versions yet")
        return
    names = sorted({m for r in rows for m in r["metrics"]})
    header = ["version", "aliases", "blessed", "trigger", *names, "data", "created"]
    lines = [header]
    for r in rows:
        blessed = "-" if r["blessed"] is None else ("yes" if r["blessed"] else "no")
        metrics = [f"{r['metrics'][m]:.4f}" if m in r["metrics"] else "-" for m in names]
        fp = (r["data_fingerprint"] or "-")[:12]
        lines.append(
            [
                r["version"],
                ",".join(r["aliases"]) or "-",
                blessed,
                r["trigger"] or "-",
                *metrics,
                fp,
                r["created"],
            ]
        )
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    for line in lines:
        print("  ".join(str(v).ljust(w) for v, w in zip(line, widths, strict=True)).rstrip())


def _print_record(record: dict) -> None:
    for key, value in record.items():
        if key in ("tags", "config", "evaluation"):
            continue
        if key == "reproduction" and value is None:
            print("reproduction: never (ctpipe models reproduce VERSION)")
            continue
        if key == "lineage":  # one line per field (the long ones, config and evaluation, only with --json)
            print("lineage (ctpipe/lineage.json):")
            for name, field in value.items():
                if name == "data_files" and isinstance(field, list):  # one per data file: --json lists them
                    print(f"  data_files: {len(field)} files (path, size, sha256 each with --json)")
                elif name != "evaluation":
                    print(f"  {name}: {json.dumps(field) if isinstance(field, dict | list) else field}")
            continue
        print(f"{key}: {json.dumps(value) if isinstance(value, dict | list) else value}")


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.registry.lock import RegistryBusyError
    from ctpipe.components.lib.tracking import RegistryUnavailableError

    try:
        return _dispatch(args)
    except (RegistryUnavailableError, RegistryBusyError) as err:
        print(f"ctpipe models {args.models_command}: error: {err}", file=sys.stderr)
        return 1


def _dispatch(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.registry.catalog import list_versions, show_version
    from ctpipe.components.lib.tracking import bounded_mlflow_http

    with bounded_mlflow_http():
        registry = _registry(args)
        action = args.models_command
        if action == "list":
            rows = list_versions(registry)
            print(json.dumps(rows, indent=2)) if args.json else _print_table(rows)
            return 0
        if action == "show":
            record = show_version(registry, args.version)
            print(json.dumps(record, indent=2)) if args.json else _print_record(record)
            return 0
        if action == "history":
            if not 0 <= args.pages <= 10_000:
                raise UserError(f"--pages {args.pages} must be in [0, 10000]")
            pages = registry.champion_history_pages(args.pages)
            moves = [e for page in reversed(pages) for e in page] + registry.champion_history()
            if args.json:
                print(json.dumps(moves, indent=2))
            for e in [] if args.json else moves:
                print(f"{e['at']}  {e['kind']:<8} {e.get('previous') or '-':>5} -> {e['version']:<5} by {e['by']}: "
                      f"{e['reason']}")
            return 0
        if action == "reproduce":
            return _reproduce(registry, args)
        by = args.by or _current_user()
        if action == "promote":
            if not args.reason.strip():
                raise UserError("--reason must say why the version is promoted by hand")
            outcome = registry.promote_manual(args.version, reason=args.reason, by=by)
        else:
            outcome = registry.rollback(reason=args.reason, by=by)
        if args.json:
            print(json.dumps(vars(outcome), indent=2))
        else:
            print(outcome.reason, file=sys.stderr)
            print(outcome.champion)
        return 0


def _reproduce(registry, args: argparse.Namespace) -> int:
    """`models reproduce`: refusals are UserErrors (exit 2); 0 bit-identical, 1 not."""
    from ctpipe.pipelines.local.reproduce import plan_reproduction, record_reproduction, run_reproduction

    if args.host:
        return _submit_reproduction(registry, args)

    plan = plan_reproduction(registry, args.version, data_uri=args.data, allow_platform_drift=args.allow_platform_drift)
    for line in plan.platform_differences:  # said before the (long) rebuild starts
        print(f"ctpipe models reproduce: platform differs from the recorded one: {line}", file=sys.stderr)
    import contextlib

    with contextlib.redirect_stdout(sys.stderr):  # the steps' progress lines: stdout holds only the result
        result = run_reproduction(plan, args.out)
    recorded = record_reproduction(registry, result)
    if recorded.get("card_error"):  # the registry's tag holds the result; its card is a copy
        print(f"ctpipe models reproduce: warning: {recorded['card_error']}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        verdict = "bit-identical" if result.identical else "NOT identical"
        print(f"version {result.version}: {verdict} ({result.seconds:.0f}s)")
        print(f"  weights sha256: registered {result.registered_weights_sha256}")
        print(f"                  reproduced {result.reproduced_weights_sha256}")
        if not result.identical:
            where = result.max_param_name or "the weights are identical"
            print(f"  largest parameter difference: {result.max_param_diff:.3g} ({where})")
            print(f"  largest test-metric difference: {result.max_metric_diff:.3g}")
            for name, m in result.metrics.items():
                print(f"    {name}: registered {m['registered']:.6g}, reproduced {m['reproduced']:.6g}")
        for line in result.platform_differences:
            print(f"  platform: {line}")
    return 0 if result.identical else 1


def _submit_reproduction(registry, args: argparse.Namespace) -> int:
    """`models reproduce --host`: start the deployed pipeline with trigger `reproduce`; prints the run (JSON)."""
    from ctpipe.components.lib.credentials import refuse_uri_credentials
    from ctpipe.pipelines.deploy import kfp_runs
    from ctpipe.pipelines.deploy.kfp_client import connect
    from ctpipe.pipelines.local.reproduce import recorded_run

    if args.out or args.allow_platform_drift:
        raise UserError("--out and --allow-platform-drift are for a rebuild on this machine; with --host the cluster "
                        "rebuilds the version and its register step records the result on it (models show)")
    for name, uri in (("--data", args.data), ("--host", args.host)):
        refuse_uri_credentials(uri, name=name, recorded_in="the run records it (its parameters and MLflow tags)")
    version, config, data, fingerprint = recorded_run(registry, args.version, data_uri=args.data)
    parameters = kfp_runs.reproduction_parameters(config_json=config.to_json(), data_uri=data,
                                                  data_fingerprint=fingerprint)
    client = connect(args.host, namespace=args.namespace, token_file=args.token_file)
    with api_errors("start the reproduction run"):
        created = kfp_runs.submit_run(
            client, parameters=parameters, run_name=kfp_runs.default_run_name(f"reproduce-v{version}"),
            experiment=args.experiment, namespace=args.namespace,
            service_account=args.service_account or config.kubernetes.service_account,
        )
    print(json.dumps({"version": version, "run_id": created.run_id, "run_name": created.display_name,
                      "trigger": parameters["trigger"]}))
    return 0


def _current_user() -> str:
    """Who runs the command, for the record. ``getpass.getuser`` raises where the uid has no passwd entry and no
    USER/LOGNAME is set (an arbitrary-uid container, as OpenShift runs them): then the uid."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        import os

        return f"uid {os.getuid()}"
