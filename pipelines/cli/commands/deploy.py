"""``ctpipe deploy``: compile the pipeline, upload it as a new version, keep one recurring run.

    ctpipe deploy --host https://kfp.example.com [--schedule "0 0 3 * * *"]   # token from $KFP_TOKEN
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.cli.commands import add_config_args


def add_kfp_args(parser: argparse.ArgumentParser, *, host_required: bool) -> None:
    """The connection options shared by deploy, submit and watch (credentials only from env or a file)."""
    parser.add_argument("--host", required=host_required, metavar="URL", help="KFP API endpoint, e.g. https://kubeflow.example.com/pipeline")
    parser.add_argument("--namespace", metavar="NS", help="Kubernetes namespace (multi-user Kubeflow)")
    parser.add_argument("--experiment", default="ctpipe", metavar="NAME", help="KFP experiment (default: ctpipe)")
    parser.add_argument("--service-account", metavar="SA", help="Kubernetes service account of the runs (default: kubernetes.service_account)")
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help="file holding the KFP bearer token (default: $KFP_TOKEN; cookies from $KFP_COOKIES)",
    )


def api_errors(action: str):
    """Turn the KFP API's rejections into one-paragraph user errors."""
    import contextlib

    import kfp_server_api

    @contextlib.contextmanager
    def wrapper():
        try:
            yield
        except kfp_server_api.ApiException as err:
            body = (err.body or b"").decode() if isinstance(err.body, bytes) else str(err.body or "")
            raise UserError(f"the KFP API refused to {action}: HTTP {err.status} {err.reason}: {body[:500]}") from None

    return wrapper()


def register(subparsers) -> None:
    parser = subparsers.add_parser("deploy", allow_abbrev=False, help="compile and upload the pipeline to KFP (new version per commit), optionally scheduled")
    add_kfp_args(parser, host_required=True)
    parser.add_argument("--version", metavar="NAME", help="pipeline version name (default: the git commit, -dirty-<hash> if changed)")
    parser.add_argument("--schedule", metavar="CRON", help="6-field cron of the recurring run, e.g. '0 0 3 * * *' (daily 03:00)")
    parser.add_argument("--pipeline-name", default=None, metavar="NAME", help="KFP pipeline name (default: ctpipe-continuous-training)")
    parser.add_argument("--package", metavar="FILE", help="upload this compiled YAML instead of compiling")
    parser.add_argument("--image", help="component image (default: kubernetes.image of the config)")
    add_config_args(parser, config_help="config compiled in as the pipeline's default")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.run_config import resolve_config
    from ctpipe.pipelines.continuous_training import PIPELINE_NAME
    from ctpipe.pipelines.deploy import upload as deploy
    from ctpipe.pipelines.deploy.kfp_client import connect

    # Before compiling: a secret in --host would be echoed in every message about the server.
    refuse_uri_credentials(args.host, name="--host", recorded_in="it is echoed in messages and logs")
    if args.schedule:
        deploy.validate_cron(args.schedule)  # fail before compiling or contacting anything
    config = resolve_config(file=args.config, settings=args.overrides, target="cluster")
    with tempfile.TemporaryDirectory() as tmp:
        if args.package:
            package = Path(args.package)
            if not package.is_file():
                raise UserError(f"--package '{args.package}' does not exist; compile with 'ctpipe compile --out FILE'.")
        else:
            from ctpipe.pipelines.compile import compile_pipeline

            package = compile_pipeline(Path(tmp) / "pipeline.yaml", args.config, args.overrides, args.image)
        version = args.version or deploy.default_version_name(package)
        client = connect(args.host, namespace=args.namespace, token_file=args.token_file)
        with api_errors("deploy the pipeline"):
            result = deploy.deploy(
                client,
                str(package),
                version_name=version,
                pipeline_name=args.pipeline_name or PIPELINE_NAME,
                experiment=args.experiment,
                namespace=args.namespace,
                schedule=args.schedule,
                service_account=args.service_account or config.kubernetes.service_account,
            )
    what = "deployed" if result.created_version else "unchanged (this version is already deployed)"
    print(f"pipeline version {result.version_name}: {what}; schedule: {result.schedule.get('action')}")
    print(json.dumps(result.to_dict()))
    return 0
