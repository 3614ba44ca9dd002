"""``ctpipe submit``: start one run, locally (like ``ctpipe run``) or on KFP with ``--host``.

    ctpipe submit --trigger manual --set train.max_steps=100            # local, prints the summary path last
    ctpipe submit --host https://kfp.example.com --trigger ci --data s3://bucket/data
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

from ctpipe.components.lib.config import TRIGGERS
from ctpipe.components.lib.credentials import redact_text, refuse_uri_credentials
from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.cli.commands import add_config_args
from ctpipe.pipelines.cli.commands.deploy import add_kfp_args, api_errors


def register(subparsers) -> None:
    parser = subparsers.add_parser("submit", allow_abbrev=False, help="start one pipeline run, locally or on KFP (--host), with a trigger reason")
    add_kfp_args(parser, host_required=False)
    parser.add_argument("--data", metavar="URI", help="data root (local default: demo data in the home; KFP default: the pipeline's)")
    parser.add_argument("--home", metavar="DIR", help="ctpipe home for a local run (default $CTPIPE_HOME or ./.ctpipe)")
    add_config_args(parser)
    parser.add_argument("--trigger", default="manual", choices=list(TRIGGERS), help="why this run starts (recorded on the model)")
    parser.add_argument("--trigger-reason", default="", metavar="TEXT", help="what fired the trigger, in words (recorded on the run and the model; the watcher gives its drift or decay finding)")
    parser.add_argument("--param", dest="params", metavar="K=V", action="append", default=[], help="extra KFP pipeline parameter, e.g. mlflow_tracking_uri=http://mlflow:5000")
    parser.add_argument("--run-name", metavar="NAME", help="KFP run name (default ctpipe-<trigger>-<UTC time>)")
    parser.add_argument("--wait", type=float, metavar="SECONDS", help="on KFP, wait up to SECONDS for the run to end; exit 0 only if it succeeded")
    parser.add_argument("--drift-report", metavar="FILE", help="the report that started the run, drift's or decay's (JSON, and its .html beside it when there is one), to attach to the run (local)")
    # The watcher's ledger record this run reports its outcome to, and which attempt it is (internal).
    parser.add_argument("--record", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--attempt", type=int, metavar="N", help=argparse.SUPPRESS)
    # The data version the watcher started this run for: data that has moved on stops it in its first step.
    parser.add_argument("--fingerprint", metavar="SHA256", default="", help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def _parse_params(items: list[str]) -> dict[str, str]:
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UserError(f"--param '{item}' must be KEY=VALUE, e.g. --param mlflow_tracking_uri=http://mlflow:5000")
        params[key.strip()] = value
    return params


def run(args: argparse.Namespace) -> int:
    # First: a local run's record, a KFP run's parameters and the watcher's ledger would keep them.
    for name, uri in (("--data", args.data), ("--host", args.host)):
        refuse_uri_credentials(uri, name=name, recorded_in="the run records it (its parameters, summary and MLflow tags)")
    params = _parse_params(args.params)
    if args.host:
        return _submit_kfp(args, params)
    if params:
        raise UserError("--param sets KFP pipeline parameters and needs --host; locally use --data, --config and --set.")
    return _submit_local(args)


def _submit_kfp(args: argparse.Namespace, params: dict[str, str]) -> int:
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.deploy import kfp_runs
    from ctpipe.pipelines.deploy.kfp_client import connect

    # Validates --config and --set before contacting the server; the file travels as config_json, over the
    # same cluster defaults the pipeline was compiled with (else it would bring back train.backend=local).
    config = resolve_config(file=args.config, settings=args.overrides, target="cluster")
    config_json = config.to_json() if args.config else None
    extra = {"trigger_reason": args.trigger_reason, **params} if args.trigger_reason else params
    parameters = kfp_runs.run_parameters(
        trigger=args.trigger, data_uri=args.data, overrides=args.overrides, config_json=config_json, extra=extra
    )
    client = connect(args.host, namespace=args.namespace, token_file=args.token_file)
    with api_errors("start the run"):
        created = kfp_runs.submit_run(
            client,
            parameters=parameters,
            run_name=args.run_name or kfp_runs.default_run_name(args.trigger),
            experiment=args.experiment,
            namespace=args.namespace,
            service_account=args.service_account or config.kubernetes.service_account,
        )
    print(json.dumps({"run_id": created.run_id, "run_name": created.display_name, "parameters": parameters}))
    if args.wait is None:
        return 0
    with api_errors("report the run's state"):
        state = kfp_runs.wait_for_run(client, created.run_id, timeout=args.wait)
    print(json.dumps({"run_id": created.run_id, "state": state}))
    return 0 if state == "SUCCEEDED" else 1


def _submit_local(args: argparse.Namespace) -> int:
    from ctpipe.pipelines.local.local_run import run_local
    from ctpipe.pipelines.local.run_summary import format_summary
    from ctpipe.pipelines.triggers.start import record_outcome

    def record(**fields) -> None:
        if args.record:
            record_outcome(args.record, args.attempt, **fields)

    # The machine too: a watcher on another machine sharing the home cannot judge this pid.
    record(status="running", pid=os.getpid(), host=socket.gethostname(), started_at=time.time())
    # The report's page, shown as the first step's output (trigger_report) as on a cluster.
    page = {}
    if args.drift_report:
        from ctpipe.pipelines.triggers.report import page_parameters

        page = page_parameters(args.drift_report)
    try:
        summary = run_local(
            home=args.home, data_uri=args.data, config_path=args.config, overrides=args.overrides, trigger=args.trigger,
            expected_fingerprint=args.fingerprint, trigger_reason=args.trigger_reason, parameters=page,
        )
    except BaseException as err:
        # A UserError (bad config, a missing data root) is the user's to fix: the watcher does not retry it.
        record(
            status="failed", error=redact_text(f"{type(err).__name__}: {err}")[:500], user_error=isinstance(err, UserError),
            error_type=type(err).__name__, finished_at=time.time(),
        )  # fmt: skip
        raise
    if args.drift_report and summary.get("mlflow_run_id"):
        _attach_report(summary, args.drift_report, args.config, args.overrides, args.home)
    error = summary.get("error") or {}
    user_error = bool(error.get("user_error"))
    record(
        status=summary["status"],
        summary_path=summary.get("summary_path"),
        run_id=summary.get("run_id"),
        model_version=summary.get("model_version"),
        error=redact_text((f"{error['step']}: " if error.get("step") else "") + str(error["message"]))[:500] if error else None,
        user_error=user_error,
        error_type=error.get("type"),
        # What the run read and what the version it names was trained on: the watcher settles the data version
        # as trained only when both are this version.
        data_fingerprint=summary.get("data_fingerprint"),
        model_fingerprint=summary.get("model_data_fingerprint"),
        finished_at=time.time(),
    )
    print(format_summary(summary))
    print(summary["summary_path"])
    if summary["status"] == "succeeded":
        return 0
    return 2 if user_error else 1  # as 'ctpipe run': 2 is the user's to fix (bad data, a failed gate)


def _attach_report(summary: dict, report: str, config_path: str | None, overrides: list[str], home: str | None) -> None:
    """Log the drift report that started this run on the run's MLflow run (artifact folder ``drift/``)."""
    from ctpipe.components.lib.tracking import local_tracking_uri
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.local.home import default_home
    from ctpipe.pipelines.triggers.report import log_drift_report

    config = resolve_config(file=config_path, settings=overrides)
    uri = config.registry.tracking_uri or local_tracking_uri(home or default_home())
    log_drift_report(uri, summary["mlflow_run_id"], report)
