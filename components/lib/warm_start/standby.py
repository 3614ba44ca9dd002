"""A clean interpreter kept warm: ``python -I`` with a few libraries imported, that runs ONE script when asked.

    python -I standby.py SOCKET_PATH [--idle] MODULE...   # listens on SOCKET_PATH, imports MODULEs, waits

Registration's serving check must load a model in an interpreter that holds nothing of ctpipe but the code
the model ships (``steps/register/serving_check.py``); a fresh ``python -I`` pays seconds of imports (MLflow,
pandas, torch) first. A standby pays them ahead, while the run does other work, and stays clean: it runs as a
file (``-I`` puts neither its folder nor PYTHONPATH on the path), imports only the standard library and the
MODULEs, never ctpipe, and serves one request only, then exits. With ``--idle`` (a local run's standby, started
early) it imports at the lowest CPU priority (Linux: a thread of nice 19), so that it uses only the cores the
run's steps leave idle; it still runs the request at normal priority.

The protocol: a caller connects and reads one byte, ``A`` (ready: it then sends the request on the same
connection) or ``W`` (still importing: ``A`` follows when done, unless the caller gives up and closes; the
standby then waits for the next caller). The request is a script with its arguments, working folder, environment
and a file for stderr; the standby runs it as ``python -I -c SCRIPT ARGS`` would and answers ``X`` and the exit
code. A caller that finds no standby, or none ready, runs the script in a fresh interpreter (``run_script``):
a standby only ever saves time.

Standard library only: the caller imports this module from the package; the standby runs it as a file.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

# Set where a standby runs for the processes of a local run: the socket its first caller connects to.
STANDBY_ENV = "CTPIPE_STANDBY_SOCKET"  # ctpipe.components.lib.warm_start.STANDBY_ENV: this file runs without the package
# A standby nobody asks within this long exits (it also dies with the process that started it).
IDLE_LIMIT_SECONDS = 24 * 3600.0
# What a served model imports from outside its own code (registration's serving check): MLflow's pyfunc,
# the frame and Parquet libraries, fsspec, torch.
SERVING_PRELOAD = ("pandas", "pyarrow.parquet", "pyarrow.pandas_compat", "fsspec", "mlflow.pyfunc", "torch")
READY, IMPORTING, EXITED = b"A", b"W", b"X"


@dataclass
class Standby:
    """A standby to run a script in: where it listens, and its process when the caller started it (the caller then
    waits for its imports; the run's, started elsewhere at low priority, is taken only when ready)."""

    socket: str
    process: subprocess.Popen | None = None
    _conn: socket.socket | None = field(default=None, repr=False)

    def reserve(self, timeout: float = 300.0) -> bool:
        """Connect and hold it for one request: True once it is ready (at once for the run's; up to ``timeout`` for
        one the caller started, while it imports); False when there is none to hold (gone, used, not ready)."""
        if self._conn is not None:
            return True
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):  # one the caller started binds as it starts
            if self.process is None or self.process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.socket)
            status = _recv_until(conn, 1, time.monotonic() + 30.0)
            if status == IMPORTING and self.process is not None:
                status = _recv_until(conn, 1, deadline)
        except (OSError, subprocess.TimeoutExpired):
            status = b""
        if status != READY:
            conn.close()
            return False
        self._conn = conn
        return True

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def run(self, request: dict, timeout: float) -> int | None:
        """The exit code of ``request``'s script run here; None when it is not held (``reserve``). One that takes
        the request and dies is exit code 1 (its stderr file says how)."""
        if not self.reserve(timeout):
            return None
        conn, self._conn = self._conn, None
        with conn:
            data = json.dumps(request).encode()
            try:
                conn.sendall(struct.pack("!Q", len(data)) + data)
            except OSError:
                return None
            reply = _recv_until(conn, 5, time.monotonic() + timeout)
        if len(reply) < 5 or reply[:1] != EXITED:
            return 1
        return struct.unpack("!i", reply[1:])[0]


def start(socket_path: str, preload: tuple[str, ...] = SERVING_PRELOAD, *, idle: bool = False,
          env: dict[str, str] | None = None, log_path: str | None = None) -> subprocess.Popen:
    """Start a standby listening on ``socket_path`` (the path appears once it accepts) that imports ``preload``, at
    the lowest CPU priority when ``idle``."""
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - the child keeps the descriptor
    try:
        return subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), socket_path,
                                 *(["--idle"] if idle else []), *preload],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/")
    finally:
        log.close()


def run_script(script: str, argv: list[str], *, cwd: str, env: dict[str, str], stderr_path: str, timeout: float,
               standby: Standby | None = None) -> tuple[int, str]:
    """Run ``script`` as ``python -I -c script *argv`` would, in ``standby`` when it is there and ready, else in a
    fresh interpreter; its exit code and how it ran. ``subprocess.TimeoutExpired`` past ``timeout``."""
    if standby is not None:
        request = {"script": script, "argv": argv, "cwd": cwd, "env": env, "stderr": stderr_path}
        code = standby.run(request, timeout)
        if code is not None:
            return code, "a warm standby interpreter"
    with open(stderr_path, "wb") as err:
        done = subprocess.run([sys.executable, "-I", "-c", script, *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=timeout)
    return done.returncode, "a fresh interpreter"


def _recv_until(conn: socket.socket, size: int, deadline: float) -> bytes:
    """Up to ``size`` bytes (fewer when the other end closes); ``subprocess.TimeoutExpired`` past ``deadline``."""
    data = b""
    while len(data) < size:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = conn.recv(size - len(data))
        except TimeoutError as err:
            raise subprocess.TimeoutExpired("standby", 0) from err
        if not chunk:
            break
        data += chunk
    return data


# --- the standby itself (run as a file) ----------------------------------------------------------------------


def _die_with_parent() -> None:
    """Linux: end with the process that started this one (a killed run leaves no standby behind)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _preload(modules: list[str], idle: bool) -> None:
    if idle:
        try:  # Linux: the priority of this thread alone; the request runs in the main thread at normal priority
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except (OSError, AttributeError):
            pass
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the script imports it itself and reports the error
            print(f"standby: did not preload {name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)


def _ready_connection(listener: socket.socket, importer: threading.Thread) -> socket.socket:
    """The first caller that is still there once the imports are done (told ``W`` while they run, then ``A``)."""
    while True:
        conn, _ = listener.accept()
        try:
            if importer.is_alive():
                conn.sendall(IMPORTING)
                while importer.is_alive():
                    importer.join(0.05)
                    if select.select([conn], [], [], 0)[0] and not conn.recv(1):
                        raise ConnectionError("the caller gave up")
            conn.sendall(READY)
            return conn
        except OSError:
            conn.close()


def _serve(socket_path: str, args: list[str]) -> int:
    _die_with_parent()
    idle = bool(args) and args[0] == "--idle"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{socket_path}.{os.getpid()}"
    listener.bind(staging)
    listener.listen(4)
    os.rename(staging, socket_path)  # callers may connect now: they hear W until the imports are done
    gc.disable()  # the collector's passes over the objects imports create are a third of their time
    importer = threading.Thread(target=_preload, args=(args[1:] if idle else args, idle), daemon=True)
    importer.start()
    listener.settimeout(IDLE_LIMIT_SECONDS)
    try:
        conn = _ready_connection(listener, importer)
    finally:
        listener.close()  # one request only: the next caller finds no standby
        os.unlink(socket_path)
    gc.enable()
    with conn:
        conn.settimeout(None)  # the caller holds it until its check is due; if it goes away, so does this
        header = _recv_exactly(conn, 8)
        request = json.loads(_recv_exactly(conn, struct.unpack("!Q", header)[0]))
        code = _run(request)
        try:
            conn.sendall(EXITED + struct.pack("!i", code))
        except OSError:
            pass
    return code


def _run(request: dict) -> int:
    """Run the request's script as ``python -I -c`` would: ``__main__``, ``sys.argv``, its folder and environment."""
    err_fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(err_fd, 2)
    os.close(err_fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["argv"]]
    main = type(sys)("__main__")
    sys.modules["__main__"] = main
    code = 0
    try:
        exec(compile(request["script"], "<string>", "exec"), main.__dict__)  # noqa: S102 - ctpipe's own script
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        if not isinstance(done.code, int | None):
            print(done.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    return code & 0xFF


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the caller closed the connection mid-request")
        data += chunk
    return bytes(data)


if __name__ == "__main__":
    try:
        status = _serve(sys.argv[1], sys.argv[2:])
    except BaseException:  # noqa: BLE001 - the caller runs the script fresh
        traceback.print_exc()
        status = 1
    os._exit(status)  # no teardown of the preloaded libraries
