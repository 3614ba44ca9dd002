"""Warm start for local runs: import the steps' libraries once, fork a process per step from there.

A local run (``ctpipe run``) starts every step, and every training rank, as a new Python process, as a
pod would on a cluster. Each of them would import torch, MLflow or Great Expectations again: seconds per
process, most of a small run's time. The warm-start server (``server.py``) imports those libraries once,
while the CLI starts and the first steps run, and forks a child per process; the child runs the usual
``python -m module args`` with the caller's arguments, environment, working directory and standard
streams. ``client.py`` is what the caller runs instead of ``python``: it hands its process over and exits
with the child's status, so the KFP local runner and the local launcher see an ordinary process.

On a cluster nothing of this runs: every step is its own pod and imports only what it uses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Set while a server runs: where its socket is. Processes started with `warm_command` go through it.
SOCKET_ENV = "CTPIPE_WARM_SOCKET"
# "0" turns warm start off for `ctpipe run` (every step then starts a fresh interpreter).
WARM_START_ENV = "CTPIPE_WARM_START"
# Where the run's clean standby interpreter listens (standby.py; the server starts it after its imports).
STANDBY_ENV = "CTPIPE_STANDBY_SOCKET"
CLIENT = Path(__file__).with_name("client.py")
READY_TIMEOUT_SECONDS = 10.0


def client_prefix() -> list[str]:
    """The command that starts a process through the server: a bare interpreter running the client."""
    return [sys.executable, "-I", "-S", str(CLIENT)]


def warm_command(command: list[str]) -> list[str]:
    """``command`` (``[sys.executable, "-m", ...]``) through the warm-start server when one runs, else as is."""
    if not os.environ.get(SOCKET_ENV) or not command or command[0] != sys.executable:
        return command
    return client_prefix() + command[1:]


_ON, _OFF = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def enabled() -> bool:
    """Whether ``ctpipe run`` starts a warm-start server (``CTPIPE_WARM_START``, on when unset)."""
    value = os.environ.get(WARM_START_ENV, "1").strip().lower()
    if value not in _ON + _OFF:
        from ctpipe.components.lib.errors import ConfigError

        raise ConfigError(
            f"{WARM_START_ENV}={os.environ[WARM_START_ENV]!r} is not a switch; allowed: "
            f"{'/'.join(_ON)} (steps forked from the warm-start server) or {'/'.join(_OFF)} (each step cold)"
        )
    return value in _ON


@dataclass
class WarmServer:
    """A running server: its socket, its log (what it could not preload or serve) and its process id."""

    socket_path: str
    log_path: Path
    pid: int

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


@contextmanager
def running_server(preload: tuple[str, ...] = (), *, with_standby: bool = False) -> Iterator[WarmServer | None]:
    """Start a warm-start server for this block and set ``SOCKET_ENV`` for the processes started in it.

    Yields the server, or None when warm start is off or the server did not come up (processes then
    start cold, as they would anyway). ``preload``: the modules to import instead of the server's
    default list (the steps' libraries). ``with_standby``: once its imports are done, the server also
    starts a clean standby interpreter for the serving check (``standby.py``), named by ``STANDBY_ENV``
    to the processes started here. The server (and its standby) stop when the block ends or when this
    process dies (it watches its stdin, a pipe from here).
    """
    if not enabled():
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="ctpipe-warm-") as tmp:
        socket_path = str(Path(tmp) / "server.sock")
        log_path = Path(tmp) / "server.log"
        # A standby for the serving check, started by the server once its own imports are done.
        standby_path = str(Path(tmp) / "standby.sock") if with_standby else None
        with open(log_path, "wb") as log:
            server = subprocess.Popen(
                [sys.executable, "-m", "ctpipe.components.lib.warm_start.server", socket_path, *preload],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=log,
                env={**os.environ, **({STANDBY_ENV: standby_path} if standby_path else {})},
            )
        previous = {name: os.environ.get(name) for name in (SOCKET_ENV, STANDBY_ENV)}
        try:
            if _wait_for(socket_path, server):
                os.environ[SOCKET_ENV] = socket_path
                if standby_path:
                    os.environ[STANDBY_ENV] = standby_path
                yield WarmServer(socket_path, log_path, server.pid)
            else:
                yield None
        finally:
            for name, value in previous.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            _stop(server)


def _wait_for(socket_path: str, server: subprocess.Popen) -> bool:
    """Wait until the server listens (it binds before it imports anything: well under a second)."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if os.path.exists(socket_path):
            return True
        if server.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def _stop(server: subprocess.Popen) -> None:
    """Close the server's stdin (it then stops its children and exits); kill it if it lingers."""
    try:
        server.stdin.close()
    except OSError:
        pass
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
