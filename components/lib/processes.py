"""Processes by pid (Linux ``/proc``): whether one runs, the tree below one, signalling them, waiting for them.

    from ctpipe.components.lib.processes import descendants, pid_alive, signal_quietly, wait_gone

Used where a process is known only by its pid: ``ctpipe run`` stopping its steps on SIGTERM, the watcher
stopping a lost attempt's leftovers, the warm-start server signalling its children. And this process's
own end without the interpreter's teardown (``exit_without_teardown``).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

POLL_SECONDS = 0.05


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (True for another user's, or without /proc)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: the signal check is all we have
    return state != "Z"


def descendants(root: int, leave_out: set[int]) -> list[int]:
    """The processes below ``root`` (Linux /proc), without those in ``leave_out`` and below them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid for pid in children.get(root, []) if pid not in leave_out]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child in children.get(pid, []) if child not in leave_out]
    return found


def signal_quietly(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``; a process that is gone, or not ours to signal, is no error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def wait_gone(pids: Iterable[int], seconds: float) -> bool:
    """Wait up to ``seconds`` until none of ``pids`` runs (``pid_alive``); whether they all went."""
    pids = list(pids)
    deadline = time.monotonic() + seconds
    while any(pid_alive(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)
    return True


def run_exit_handlers() -> None:
    """What the interpreter's exit does before it tears the modules down: wait for the threads that are not
    daemons, run the ``atexit`` handlers, flush standard output and error."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    _flush_standard_streams()


def exit_without_teardown(code: int) -> None:
    """Exit with ``code`` now, skipping the interpreter's teardown: for a process that has cleaned up (its
    files written, its exit handlers run), where tearing down the modules of torch, MLflow, GX or KFP costs
    0.2-3 s that a caller waits for. A process forked by the warm-start server tells its client first."""
    logging.shutdown()
    _flush_standard_streams()
    server = sys.modules.get("ctpipe.components.lib.warm_start.server")
    if server is not None:
        server.report_exit(code)
    os._exit(code)


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader gone
            stream.flush()
