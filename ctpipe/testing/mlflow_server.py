"""A local ``mlflow server`` (SQLite backend, artifacts on disk) in its own session: start, stop, restart.

The server path on one machine, without a cluster: the registry tests race processes against it and
``benchmarks/soak.py --mlflow server`` restarts it under a running pipeline. The server forks a worker,
so it is started as a session of its own and stopped by that session's id.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


class LocalMlflowServer:
    """``mlflow server --workers 1`` on 127.0.0.1 with its database and artifacts under ``root``."""

    def __init__(self, root: str | Path, port: int | None = None) -> None:
        self.root = Path(root)
        self.port = port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.log_path = self.root / "server.log"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self, timeout: float = 180.0) -> LocalMlflowServer:
        """Start the server and wait until ``/health`` answers; raise with the log's path if it does not."""
        self.root.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{self.root / 'server.db'}",
            "--artifacts-destination", str(self.root / "artifacts"),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.root
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited early; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {timeout:.0f} s; see {self.log_path}")

    def stop(self) -> None:
        """Stop the server and its worker (SIGTERM to the session, SIGKILL if it lingers)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def restart(self, down_seconds: float) -> None:
        """Stop, stay down ``down_seconds``, start again on the same port and database."""
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
