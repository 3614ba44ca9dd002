"""``ctpipe serve``: serve a registered model on 127.0.0.1 with MLflow's scoring server, after verifying it.

    ctpipe serve --home .ctpipe                                  # the champion, on http://127.0.0.1:5001
    ctpipe serve --model models:/ctpipe-classifier/3 --port 8080
    ctpipe serve --download champion        # verify and write the model folder, then exit (mlflow.pyfunc loads it)
    curl -s http://127.0.0.1:5001/invocations -H 'Content-Type: application/json' \\
         -d '{"dataframe_records": [{"tenure_months": 3, ...}]}'

A thin wrapper over ``mlflow models serve --env-manager local``: the version's files are downloaded and checked
against the registry's digest first (``components/lib/registry/verified_model.py``), then served from that
folder by a fresh interpreter, where the code the model ships comes first on the import path.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from ctpipe.pipelines.cli.commands import add_config_args, existing_registry_uri

DEFAULT_PORT = 5001


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="serve the champion (or another version) on 127.0.0.1, verified first",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", metavar="URI",
                        help="models:/NAME@ALIAS or models:/NAME/VERSION (default: the champion of registry.model_name)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; a predictor container gives 0.0.0.0)")
    parser.add_argument("--download", metavar="DIR",
                        help="verify the model and write its folder to DIR (new or empty), then exit without serving")
    parser.add_argument("--home", metavar="DIR", help="ctpipe home with mlflow.db (default $CTPIPE_HOME or ./.ctpipe)")
    parser.add_argument("--tracking-uri", metavar="URI",
                        help="MLflow tracking URI (default registry.tracking_uri, else the --home's SQLite)")
    add_config_args(parser, config_help="the pipeline's config file (its registry section names the model)",
                    example="registry.model_name=churn")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ctpipe.components.lib.errors import UserError
    from ctpipe.components.lib.prediction_log import serving_environment
    from ctpipe.components.lib.registry.verified_model import download_verified, resolve_version
    from ctpipe.components.run_config import resolve_config

    if not 0 < args.port < 65536:
        raise UserError(f"--port {args.port}: expected a port number from 1 to 65535")
    config = resolve_config(file=args.config, settings=args.overrides)
    registry = config.registry
    uri = existing_registry_uri(args, registry.tracking_uri)
    model_uri = args.model or f"models:/{registry.model_name}@{registry.champion_alias}"
    if args.download:
        local = download_verified(model_uri, args.download, tracking_uri=uri)
        print(f"{model_uri} verified and written to {local}")
        return 0
    # The alias resolved once: the version served is the version its prediction log names.
    name, version = resolve_version(model_uri, tracking_uri=uri)
    log_env = serving_environment(config.serving, name, version)
    with tempfile.TemporaryDirectory(prefix="ctpipe-serve-") as scratch:
        local = download_verified(f"models:/{name}/{version}", os.path.join(scratch, "model"), tracking_uri=uri)
        print(f"serving {model_uri} (version {version}, verified) on http://{args.host}:{args.port}/invocations"
              + (f", logging predictions to {config.serving.prediction_log}" if log_env else ""), flush=True)
        return serve_folder(str(local), args.host, args.port, cwd=scratch, extra_env=log_env)


def serve_folder(model_dir: str, host: str, port: int, *, cwd: str, extra_env: dict[str, str] | None = None) -> int:
    """Run MLflow's scoring server for ``model_dir`` on ``host`` until it exits or this process is stopped;
    ``extra_env`` (the prediction log's settings) goes into the server's environment."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (extra_env or {})
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    command = [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_dir, "--env-manager", "local",
               "--host", host, "--port", str(port)]
    # Its own session, so that stopping `ctpipe serve` stops the server and the workers it starts.
    server = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        _stop_group(server.pid)


def _stop_group(pgid: int, grace: float = 10.0) -> None:
    """Wait until no process of the server's session is left (its workers hold the port after their parent has
    exited), then SIGKILL any that outlived ``grace``: when `ctpipe serve` returns, the port is free."""
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.waitpid(-pgid, os.WNOHANG)  # a worker reparented to this process (PID 1 in a container) is reaped
        except ChildProcessError:
            pass
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt
