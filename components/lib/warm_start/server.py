"""The warm-start server: import the steps' libraries once, then fork a child per process asked for.

    python -m ctpipe.components.lib.warm_start.server SOCKET_PATH [MODULE ...]   # MODULEs: preload these instead

It listens first, then imports ``PRELOAD`` one module at a time in the order the pipeline needs them
(MLflow and what building a new store imports, then its SQL store and KFP's executor for the first step,
pandas, Great Expectations, then torch), serving requests
between two imports and importing first the module a waiting request needs, so that a step never waits
for a library it does not use (a cached rerun starts evaluate right after prepare_run). A request (from
``client.py``) brings ``python``'s arguments, an environment, a working directory and three file
descriptors; the child takes them over and runs the arguments as ``python`` would (``-m module`` or a
script), then exits with their code.

A request whose modules (``needed_modules``: its step's or its ``-m`` module, and their first-use imports)
are still in the preload list waits for them: forked earlier, the child would import them a second time,
beside the server, on cores the first steps keep busy. The child tells its client its exit code itself as
it exits (the server may be inside an import then); the server sends the wait status of a child killed by
a signal, forwards the client's signals, and kills the child if the client goes away. Nothing preloaded is
used here before a fork (no threads, no OpenMP pool, no database connection): that makes forking safe.

Single-threaded on purpose: a fork while another thread imports would leave the child with a held import
lock. Two cores are used by two processes instead: once what every step needs is imported, the server forks its
branch (``branch.py``), which imports torch's side of the list and forks the requests that need it, while the
server goes on with GX. The server stops when its stdin (a pipe from ``ctpipe run``) closes, stopping any child left.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback

from ctpipe.components.lib.processes import signal_quietly
from ctpipe.components.lib.warm_start import branch, standby
from ctpipe.components.lib.warm_start.as_python import apply_thread_count, reconfigure_streams, run_python

# In the order the steps need them; a module that fails to import is skipped (the step then imports it
# itself and reports the error where it belongs).
PRELOAD = (
    "mlflow",
    "mlflow.store.db.utils",  # what building a new store imports (MLflow's schema and migrations)
    "ctpipe.components.lib.tracking.sqlite_store",  # `ctpipe run` runs it (-m) to build a new home's store ahead
    "mlflow.store.tracking.sqlalchemy_store",
    "mlflow.store.tracking.sqlalchemy_workspace_store",  # MLflow's _get_store imports it when a store is opened
    "kfp.dsl.executor",
    "ctpipe.components.lib.kfp_support",
    "ctpipe.components.lib.config",
    "ctpipe.components.steps.prepare_run.prepare",
    "pandas",
    "pyarrow.parquet",
    "great_expectations",
    "ctpipe.components.steps.validate_data.validate",
    "torch",
    "torch.distributed",
    "torch._dynamo",
    "ctpipe.components.tasks.tabular",
    "ctpipe.components.steps.sanity_checks.gate",
    "ctpipe.components.steps.sanity_checks.trial_gate",  # what the tune step runs (-m) to gate its trials
    "ctpipe.components.steps.train.launch",  # also what a tuning trial runs (-m)
    "ctpipe.components.steps.tune.tune",
    "ctpipe.components.engine.trainer",
    "ctpipe.components.engine.tracker",
    "ctpipe.components.steps.train.worker",  # what a training rank runs (-m): the ranks start while sanity runs
    "ctpipe.components.steps.select_checkpoint.select",
    "ctpipe.components.tasks.export",
    "ctpipe.components.steps.evaluate.evaluate",
    "mlflow.pyfunc",
    "ctpipe.components.steps.register.register",
)
# The module a pipeline step (the KFP executor's ``--function_to_execute``) needs before it is worth
# forking; a process run as ``-m MODULE`` needs MODULE itself when it is in the preload list.
STEP_MODULES = {
    "prepare_run": "ctpipe.components.steps.prepare_run.prepare",
    "validate_data": "ctpipe.components.steps.validate_data.validate",
    "sanity_checks": "ctpipe.components.steps.sanity_checks.gate",
    "tune": "ctpipe.components.steps.tune.tune",
    "train": "ctpipe.components.steps.train.launch",
    "select_checkpoint": "ctpipe.components.steps.select_checkpoint.select",
    "evaluate": "ctpipe.components.steps.evaluate.evaluate",
    "register": "ctpipe.components.steps.register.register",
}
# Libraries a step's module imports only on first use, which its forked child would otherwise import itself
# (docs/performance.md): AdamW's constructor imports torch._dynamo (and sympy, ~2 CPU s) in the sanity gate and
# every rank; prepare_run opens MLflow's SQL store (moved ahead of it by _next_preload, prepare_run imported it
# beside the server: 1.5 s of a loaded first run); the store builder needs only MLflow's schema code, so it is
# forked while the server goes on with the SQL store and KFP, and the store is built when prepare_run opens it.
_MLFLOW_SQL_STORE = ("mlflow.store.tracking.sqlalchemy_store", "mlflow.store.tracking.sqlalchemy_workspace_store")
FIRST_USE_IMPORTS = {
    "ctpipe.components.steps.prepare_run.prepare": _MLFLOW_SQL_STORE,
    "ctpipe.components.lib.tracking.sqlite_store": ("mlflow.store.db.utils",),
    "ctpipe.components.steps.sanity_checks.gate": ("torch._dynamo",),
    "ctpipe.components.steps.train.worker": ("torch._dynamo",),
}
# What every step's process (``python -m kfp.dsl.executor_main``) imports before its function's module.
STEP_BASE = ("kfp.dsl.executor", "ctpipe.components.lib.kfp_support", "ctpipe.components.lib.config")
KFP_RUNTIME_ENV = "_KFP_RUNTIME"
STOP_GRACE_SECONDS = 3.0
# True in a child: the process was forked from the server (its libraries were loaded before it began).
IN_CHILD = False
# In a child: the connection its client waits on for the exit code (report_exit).
_CALLER: socket.socket | None = None
PR_SET_PDEATHSIG = 1


class _Child:
    def __init__(self, pid: int, pidfd: int, conn: socket.socket) -> None:
        self.pid = pid
        self.pidfd = pidfd
        self.conn = conn


def needed_module(argv: list[str]) -> str | None:
    """The module a request's process needs preloaded: its step's (``--function_to_execute NAME``) or, for
    ``-m MODULE``, MODULE itself; None when nothing is known."""
    if "--function_to_execute" in argv[:-1]:
        return STEP_MODULES.get(argv[argv.index("--function_to_execute") + 1])
    if len(argv) > 1 and argv[0] == "-m":
        return argv[1]
    return None


def needed_modules(argv: list[str]) -> tuple[str, ...]:
    """What a request's process needs preloaded before it is forked: for a pipeline step, KFP's executor
    (``STEP_BASE``); its module's first-use imports; then the module (``needed_module``)."""
    module = needed_module(argv)
    if module is None:
        return ()
    base = STEP_BASE if "--function_to_execute" in argv[:-1] else ()
    return (*base, *FIRST_USE_IMPORTS.get(module, ()), module)


class _Request:
    """An accepted request not forked yet: it waits for its modules (``needed_modules``) to be preloaded."""

    def __init__(self, conn: socket.socket, fds: list[int], request: dict, needs: tuple[str, ...]) -> None:
        self.conn, self.fds, self.request, self.needs = conn, fds, request, needs


class Server:
    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.by_pidfd: dict[int, _Child] = {}
        self.by_conn: dict[int, _Child] = {}
        self.waiting: list[_Request] = []
        self.pending: list[str] = []
        self.standby = None
        self.branch: branch.Branch | None = None
        self.is_branch = False  # True in the branch (branch.py): torch's side of the preload list

    def serve(self, preload: tuple[str, ...] = PRELOAD) -> None:
        self.pending = pending = list(preload)
        branch_modules = branch.branch_modules(preload)
        # The collector's passes over the objects that imports create are a third of the import time
        # (5.6 s -> 3.8 s for these libraries); what they would free is a few import-time cycles.
        gc.disable()
        while True:
            branched = [self.branch.pidfd] if self.branch is not None else []
            watched = [self.listener.fileno(), sys.stdin.fileno(), *self.by_conn, *self.by_pidfd, *branched]
            ready, _, _ = select.select(watched, [], [], 0 if pending else None)
            for fd in ready:
                if fd == self.listener.fileno():
                    self._accept()
                elif fd == sys.stdin.fileno():
                    if not os.read(fd, 4096):
                        return
                elif fd in self.by_pidfd:
                    self._reap(self.by_pidfd[fd])
                elif fd in branched:  # it ended before the run did: its requests are the server's again
                    self.branch = self.branch.ended()
                elif fd in self.by_conn:
                    self._from_client(self.by_conn[fd])
            if pending:
                _preload(pending.pop(self._next_preload()))
                if branch.time_to_fork(pending, branch_modules):
                    self.branch, branch_modules = branch.fork_branch(self, branch_modules), frozenset()
                if not pending:
                    gc.freeze()  # the children share these objects' pages instead of copying them
                    gc.enable()
                    self._start_standby()
                self._start_ready()

    def _next_preload(self) -> int:
        """Where in ``pending`` the next import is: what the first waiting request needs, else the next in order
        (a cached rerun goes on at evaluate, which would otherwise wait for GX and the training modules)."""
        needed = next((m for w in self.waiting for m in w.needs if m in self.pending), None)
        return self.pending.index(needed) if needed is not None else 0

    def _start_standby(self) -> None:
        """Once its imports are done, the run's clean standby (``standby.py``, for the serving check), if asked for."""
        path = os.environ.get(standby.STANDBY_ENV)
        if path and self.standby is None:
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "PYTHONHOME", standby.STANDBY_ENV, KFP_RUNTIME_ENV)}
            try:
                self.standby = standby.start(path, idle=True, env=env | {"MLFLOW_DISABLE_TELEMETRY": "true"})
            except OSError as err:  # the serving check then starts its own
                print(f"ctpipe warm start: no standby: {err}", file=sys.stderr, flush=True)

    def stop_children(self) -> None:
        """Stop the children still running: SIGTERM, then SIGKILL after a grace period. A request still
        waiting for its module is dropped (its client then reports that the server went away)."""
        for waiting in self.waiting:
            _close_request(waiting)
        self.waiting = []
        children = list(self.by_pidfd.values())
        for child in children:
            signal_quietly(child.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for child in children:
            while time.monotonic() < deadline:
                pid, status = os.waitpid(child.pid, os.WNOHANG)
                if pid:
                    self._finish(child, status)
                    break
                time.sleep(0.02)
            else:
                signal_quietly(child.pid, signal.SIGKILL)
                self._reap(child)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        fds: list[int] = []
        try:
            conn.settimeout(10)
            header, fds, _, _ = socket.recv_fds(conn, 8, 3)
            if len(header) != 8 or len(fds) != 3:
                raise ValueError("a request starts with its length and three file descriptors")
            request = json.loads(_recv_exactly(conn, struct.unpack("!Q", header)[0]))
            conn.settimeout(None)
            needs = needed_modules(list(request["argv"]))
        except Exception as err:  # a bad request: the client then runs its process cold
            _refuse(_Request(conn, fds, {}, ()), err)
            return
        self.queue(conn, fds, request, needs)

    def queue(self, conn: socket.socket, fds: list[int], request: dict, needs: tuple[str, ...] | None = None) -> None:
        """Queue an accepted request until its modules are preloaded, or hand it to the branch if it needs the
        branch's side."""
        needs = needed_modules(list(request["argv"])) if needs is None else needs
        if self.branch is not None and self.branch.takes(needs) and self.branch.hand_over(conn, fds, request):
            return _close_request(_Request(conn, fds, request, needs))
        self.waiting.append(_Request(conn, fds, request, needs))
        self._start_ready()

    def _start_ready(self) -> None:
        """Fork, in arrival order, the waiting requests whose module is no longer to be preloaded."""
        # One at a time, each leaving ``waiting`` before its fork: a child closes the requests still there.
        while ready := next((w for w in self.waiting if not any(m in self.pending for m in w.needs)), None):
            self.waiting.remove(ready)
            self._fork(ready)

    def _fork(self, waiting: _Request) -> None:
        try:
            pid = os.fork()
            if pid == 0:
                self._become(waiting.request, waiting.fds, waiting.conn)
            child = _Child(pid, os.pidfd_open(pid), waiting.conn)
        except Exception as err:  # no fork: the client then runs its process cold
            _refuse(waiting, err)
            return
        for fd in waiting.fds:
            os.close(fd)
        self.by_pidfd[child.pidfd] = child
        self.by_conn[waiting.conn.fileno()] = child

    def _from_client(self, child: _Child) -> None:
        try:
            message = child.conn.recv(5)
        except OSError:
            message = b""
        if not message:  # the client is gone (killed): so is its process
            del self.by_conn[child.conn.fileno()]
            signal_quietly(child.pid, signal.SIGKILL)
        elif message[:1] == b"S" and len(message) == 5:
            signal_quietly(child.pid, struct.unpack("!i", message[1:])[0])

    def _reap(self, child: _Child) -> None:
        """Wait for the child (its pidfd said it ended, or it was killed) and report its status."""
        if child.pidfd in self.by_pidfd:
            self._finish(child, os.waitpid(child.pid, 0)[1])

    def _finish(self, child: _Child, status: int) -> None:
        """The child has been waited for: tell its client how it ended and forget it."""
        del self.by_pidfd[child.pidfd]
        self.by_conn.pop(child.conn.fileno(), None)
        os.close(child.pidfd)
        _send(child.conn, b"X", status)
        child.conn.close()

    def _become(self, request: dict, fds: list[int], conn: socket.socket) -> None:
        """In the child: take over the client's streams, environment and arguments; run; exit."""
        global IN_CHILD, _CALLER
        IN_CHILD, _CALLER = True, conn
        code = 1
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the server gone (killed): so is the child
            self.listener.close()
            for child in self.by_pidfd.values():
                os.close(child.pidfd)
                child.conn.close()
            for waiting in self.waiting:
                _close_request(waiting)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            for sig in (signal.SIGTERM, signal.SIGHUP):
                signal.signal(sig, signal.SIG_DFL)
            for sig in request.get("ignored", ()):  # what the caller ignores, as a cold python inherits it
                signal.signal(sig, signal.SIG_IGN)
            # A child forked while the server preloads: what was imported stays out of its collections.
            gc.freeze()
            gc.enable()
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
                os.close(fd)
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(request["env"])
            reconfigure_streams()
            apply_thread_count()
            code = run_python(list(request["argv"]), request["cwd"])
        except BaseException:  # noqa: BLE001 - the child must end here, never return into the server
            traceback.print_exc()
        finally:
            report_exit(code)
            os._exit(code)


def report_exit(code: int) -> None:
    """In a child: tell its client the exit code now, as the process ends (``processes.exit_without_teardown``
    calls this before ``os._exit``); the server answers only between two imports, a second or more later while
    it preloads. A child killed by a signal is the server's to report. Elsewhere: nothing."""
    if _CALLER is not None:
        _send(_CALLER, b"X", (code & 0xFF) << 8)


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the client closed the connection mid-request")
        data += chunk
    return bytes(data)


def _refuse(waiting: _Request, err: Exception) -> None:
    """Tell the client to run its process cold (a bad request, or no fork) and forget the request."""
    print(f"ctpipe warm start: cannot serve a request: {err}", file=sys.stderr, flush=True)
    _send(waiting.conn, b"C", 0)
    _close_request(waiting)


def _close_request(waiting: _Request) -> None:
    for fd in waiting.fds:
        os.close(fd)
    waiting.conn.close()


def _send(conn: socket.socket, kind: bytes, value: int) -> None:
    try:
        conn.sendall(kind + struct.pack("!i", value))
    except OSError:
        pass


def _preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as err:  # noqa: BLE001 - the step that needs it imports it and reports the error
        print(f"ctpipe warm start: did not preload {name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)


def _listen(path: str) -> socket.socket:
    """Listen on ``path``; the path appears only once connections are accepted (bind, listen, rename)."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    listener.bind(staging)
    listener.listen(64)
    os.rename(staging, path)
    return listener


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m ctpipe.components.lib.warm_start.server SOCKET_PATH [MODULE ...]", file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops `ctpipe run`, which closes our stdin
    # KFP as a step's executor imports it: no API client, no DSL compiler (0.4 s). A child gets its caller's env.
    os.environ[KFP_RUNTIME_ENV] = "true"
    server = Server(_listen(argv[0]))
    try:
        server.serve(tuple(argv[1:]) or PRELOAD)
    finally:
        server.stop_children()
        if server.branch is not None:
            server.branch.stop()
        if server.standby is not None:
            server.standby.kill()
            server.standby.wait()
        if not server.is_branch:  # the socket is the server's
            with contextlib.suppress(OSError):
                os.unlink(argv[0])
    return 0


if __name__ == "__main__":
    # Run as the importable module, not as __main__: the children read IN_CHILD from there.
    from ctpipe.components.lib.warm_start import server as _server

    code = _server.main(sys.argv[1:])
    sys.stderr.flush()
    os._exit(code)  # no teardown of the preloaded libraries (~0.3 s): nothing of them is in use here
