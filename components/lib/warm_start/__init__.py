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


@dataclass
class _Started:
    """A server process just spawned: its temporary directory (socket, log, standby socket) and process."""

    tmp: tempfile.TemporaryDirectory
    process: subprocess.Popen
    socket_path: str
    log_path: Path
    standby_path: str | None

    def close(self) -> None:
        _stop(self.process)
        self.tmp.cleanup()


# The server `ctpipe run` started as its process began (start_early), until running_server takes it.
_EARLY: _Started | None = None


def _spawn(preload: tuple[str, ...], with_standby: bool) -> _Started:
    tmp = tempfile.TemporaryDirectory(prefix="ctpipe-warm-")
    socket_path = str(Path(tmp.name) / "server.sock")
    log_path = Path(tmp.name) / "server.log"
    # A standby for the serving check, started by the server once its own imports are done.
    standby_path = str(Path(tmp.name) / "standby.sock") if with_standby else None
    env = {**os.environ, **({STANDBY_ENV: standby_path} if standby_path else {})}
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")  # as the CLI sets it for every process it starts
    try:
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "ctpipe.components.lib.warm_start.server", socket_path, *preload],
                stdin=subprocess.PIPE, stdout=log, stderr=log, env=env,
            )
    except BaseException:
        tmp.cleanup()
        raise
    return _Started(tmp, process, socket_path, log_path, standby_path)


def start_early(argv: list[str]) -> None:
    """Start the server a ``ctpipe ARGV`` run with the subprocess runner will take (``running_server``), before the
    CLI imports its commands: the server's imports head the first step's start, and the CLI's own start-up
    (~0.15 s) then overlaps them instead of preceding them. Nothing for any other command, with warm start off,
    or in a process that has one; a server nobody takes is stopped when this process exits."""
    global _EARLY
    runner = next((a.split("=", 1)[1] for a in argv if a.startswith("--runner=")), None)
    if "--runner" in argv[:-1]:
        runner = argv[argv.index("--runner") + 1]
    if (_EARLY is not None or argv[:1] != ["run"] or runner not in (None, "subprocess")
            or {"-h", "--help"} & set(argv) or os.environ.get(SOCKET_ENV)
            or os.environ.get(WARM_START_ENV, "1").strip().lower() not in _ON):
        return
    try:
        _EARLY = _spawn((), with_standby=True)
    except OSError:  # running_server then tries again, and says why
        return
    import atexit

    atexit.register(_stop_early)


def _stop_early() -> None:
    global _EARLY
    if _EARLY is not None:
        started, _EARLY = _EARLY, None
        started.close()


@contextmanager
def running_server(preload: tuple[str, ...] = (), *, with_standby: bool = False) -> Iterator[WarmServer | None]:
    """Start a warm-start server for this block and set ``SOCKET_ENV`` for the processes started in it.

    Yields the server, or None when warm start is off or the server did not come up (processes then
    start cold, as they would anyway). ``preload``: the modules to import instead of the server's
    default list (the steps' libraries). ``with_standby``: once its imports are done, the server also
    starts a clean standby interpreter for the serving check (``standby.py``), named by ``STANDBY_ENV``
    to the processes started here. The server (and its standby) stop when the block ends or when this
    process dies (it watches its stdin, a pipe from here). A server that ``start_early`` started for the
    same list and standby is taken instead of a new one.
    """
    global _EARLY
    if not enabled():
        yield None
        return
    if _EARLY is not None and not preload and with_standby and _EARLY.process.poll() is None:
        started, _EARLY = _EARLY, None
    else:
        started = _spawn(preload, with_standby)
    previous = {name: os.environ.get(name) for name in (SOCKET_ENV, STANDBY_ENV)}
    try:
        if _wait_for(started.socket_path, started.process):
            os.environ[SOCKET_ENV] = started.socket_path
            if started.standby_path:
                os.environ[STANDBY_ENV] = started.standby_path
            yield WarmServer(started.socket_path, started.log_path, started.process.pid)
        else:
            yield None
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        started.close()


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
