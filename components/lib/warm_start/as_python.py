"""Run ``python ARGV`` inside this process as the interpreter would: what a child forked from the warm-start server
does once it has taken over its caller's streams, environment and working directory (``server.py``)."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback

from ctpipe.components.lib.processes import run_exit_handlers


def run_python(argv: list[str], cwd: str) -> int:
    """Run ``python ARGV`` (``-m module args`` or ``script args``) in this process; its exit code.

    As the interpreter would: ``sys.argv`` and ``sys.path[0]`` set the same way, an uncaught exception
    printed, non-daemon threads joined and ``atexit`` handlers run before the exit.
    """
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            sys.path[0] = cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        code = exit_code(done.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 - what the interpreter does with an uncaught exception
        traceback.print_exc()
        code = 1
    run_exit_handlers()
    return code


def exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def reconfigure_streams() -> None:
    """stdout and stderr now write to the client's descriptors: buffer them as python would there."""
    line_buffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=line_buffered or stream is sys.stderr or stream.isatty())
        except (AttributeError, OSError, ValueError):
            pass


def apply_thread_count() -> None:
    """torch's OpenMP pool took its size from the server's environment when it loaded: apply the
    caller's ``OMP_NUM_THREADS`` (a cold interpreter would have read it at import)."""
    torch = sys.modules.get("torch")
    value = os.environ.get("OMP_NUM_THREADS", "")
    if torch is not None and value.isdigit() and int(value) > 0 and int(value) != torch.get_num_threads():
        torch.set_num_threads(int(value))
