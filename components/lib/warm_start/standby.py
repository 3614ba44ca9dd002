"""A clean interpreter kept warm: ``python -I`` with a few libraries imported, that runs ONE script when asked.

    python -I standby.py SOCKET_PATH MODULE...        # listens on SOCKET_PATH, imports MODULEs, waits

Registration's serving check must load a model in an interpreter that holds nothing of ctpipe but the code
the model ships (``steps/register/serving_check.py``); a fresh ``python -I`` pays seconds of imports (MLflow,
pandas, torch) first. A standby pays them ahead, while the run does other work, and stays clean: it runs as a
file (``-I`` puts neither its folder nor PYTHONPATH on the path), imports only the standard library and the
MODULEs, never ctpipe, and serves one request only, then exits. The request is a script with its arguments,
working folder and environment: the standby runs it as ``python -I -c SCRIPT ARGS`` would, with stderr to a
file the caller names, and answers the exit code. A caller that finds no standby, or one that went away,
runs the script in a fresh interpreter instead (``run_script``): a standby only ever saves time.

Standard library only: the caller imports this module from the package; the standby runs it as a file.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import traceback
from typing import NamedTuple

# Set where a standby runs for the processes of a local run: the socket its first caller connects to.
STANDBY_ENV = "CTPIPE_STANDBY_SOCKET"  # ctpipe.components.lib.warm_start.STANDBY_ENV: this file runs without the package
# A standby nobody asks within this long exits (it also dies with the process that started it).
IDLE_LIMIT_SECONDS = 24 * 3600.0
# What a served model imports from outside its own code (registration's serving check): MLflow's pyfunc,
# the frame and Parquet libraries, fsspec, torch.
SERVING_PRELOAD = ("pandas", "pyarrow.parquet", "pyarrow.pandas_compat", "fsspec", "mlflow.pyfunc", "torch")


class Standby(NamedTuple):
    """Where a standby listens, and its process when the caller started it (None: the run's, started elsewhere)."""

    socket: str
    process: subprocess.Popen | None = None

    def wait_listening(self, timeout: float = 30.0) -> bool:
        """Whether it listens, waiting up to ``timeout`` for one the caller started (it binds as it starts)."""
        deadline = time.monotonic() + timeout
        while not os.path.exists(self.socket):
            if self.process is None or self.process.poll() is not None or time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True


def start(socket_path: str, preload: tuple[str, ...] = SERVING_PRELOAD, *, env: dict[str, str] | None = None,
          log_path: str | None = None) -> subprocess.Popen:
    """Start a standby listening on ``socket_path`` (the path appears once it accepts) that imports ``preload``."""
    log = open(log_path or os.devnull, "ab")  # noqa: SIM115 - the child keeps the descriptor
    try:
        return subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), socket_path, *preload],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd="/")
    finally:
        log.close()


def run_script(script: str, argv: list[str], *, cwd: str, env: dict[str, str], stderr_path: str, timeout: float,
               standby: Standby | None = None) -> tuple[int, str]:
    """Run ``script`` as ``python -I -c script *argv`` would, in ``standby`` when it answers, else in a fresh
    interpreter; its exit code and how it ran. ``subprocess.TimeoutExpired`` past ``timeout``."""
    if standby is not None and standby.wait_listening():
        code = _in_standby(standby.socket, script, argv, cwd=cwd, env=env, stderr_path=stderr_path, timeout=timeout)
        if code is not None:
            return code, "a warm standby interpreter"
    with open(stderr_path, "wb") as err:
        done = subprocess.run([sys.executable, "-I", "-c", script, *argv], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                              stderr=err, timeout=timeout)
    return done.returncode, "a fresh interpreter"


def _in_standby(path: str, script: str, argv: list[str], *, cwd: str, env: dict[str, str], stderr_path: str,
                timeout: float) -> int | None:
    """The exit code of ``script`` run by the standby at ``path``; None when there is none to take it (gone, used,
    not listening): the caller then runs it fresh. One that takes it and dies is exit code 1 (its stderr says how)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + timeout
    with conn:
        try:
            conn.connect(path)
            request = json.dumps({"script": script, "argv": argv, "cwd": cwd, "env": env, "stderr": stderr_path})
            conn.sendall(struct.pack("!Q", len(request)) + request.encode())
            # "A" once it has the request (it still imports until then: callers wait in its backlog), then "X" + code.
            taken = _recv_until(conn, 1, deadline, timeout)
        except (OSError, ValueError):
            return None
        if taken != b"A":
            return None
        reply = _recv_until(conn, 5, deadline, timeout)
    if len(reply) < 5 or reply[:1] != b"X":
        return 1
    return struct.unpack("!i", reply[1:])[0]


def _recv_until(conn: socket.socket, size: int, deadline: float, timeout: float) -> bytes:
    """Up to ``size`` bytes (fewer when the other end closes); ``subprocess.TimeoutExpired`` past ``deadline``."""
    data = b""
    while len(data) < size:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            chunk = conn.recv(size - len(data))
        except TimeoutError as err:
            raise subprocess.TimeoutExpired("standby", timeout) from err
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


def _serve(socket_path: str, preload: list[str]) -> int:
    _die_with_parent()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{socket_path}.{os.getpid()}"
    listener.bind(staging)
    listener.listen(1)
    os.rename(staging, socket_path)  # callers may connect now; they wait in the backlog until the imports are done
    gc.disable()  # the collector's passes over the objects imports create are a third of their time
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception as err:  # noqa: BLE001 - the script imports it itself and reports the error
            print(f"standby: did not preload {name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
    gc.enable()
    listener.settimeout(IDLE_LIMIT_SECONDS)
    try:
        conn, _ = listener.accept()
    finally:
        listener.close()  # one request only: the next caller finds no standby
        os.unlink(socket_path)
    with conn:
        conn.settimeout(30)
        header = _recv_exactly(conn, 8)
        request = json.loads(_recv_exactly(conn, struct.unpack("!Q", header)[0]))
        conn.settimeout(None)
        conn.sendall(b"A")
        code = _run(request)
        try:
            conn.sendall(b"X" + struct.pack("!i", code))
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
