"""SIGTERM to ``ctpipe run`` stops every process below it, then ends the run as Ctrl-C would.

    with sigterm_stops_the_steps(warm):   # around the local runner's run of the pipeline
        ...
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

from ctpipe.components.lib.processes import descendants, signal_quietly, wait_gone
from ctpipe.components.lib.warm_start import WarmServer

TERM_GRACE_SECONDS = 5.0


class Terminated(KeyboardInterrupt):
    """SIGTERM reached ``ctpipe run``: the run ends as after Ctrl-C (no summary), with exit code 143."""

    signum = signal.SIGTERM


@contextlib.contextmanager
def sigterm_stops_the_steps(warm: WarmServer | None) -> Iterator[None]:
    """While the pipeline runs, SIGTERM to this process stops every process below it, then ends the run.

    Ctrl-C reaches all of a run's processes from the terminal; ``kill PID`` (a supervisor, a CI timeout)
    reaches this one only. Python's default, dying alone, left steps started cold and their training
    ranks running. The warm-start server is left out: it stops its own children when its block ends,
    each step as a SIGTERM would (ranks first, the step's record written).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signalled: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
        signalled.extend(descendants(os.getpid(), leave_out={warm.pid} if warm else set()))
        for pid in signalled:
            signal_quietly(pid, signal.SIGTERM)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        wait_gone(signalled, TERM_GRACE_SECONDS)
        for pid in signalled:
            signal_quietly(pid, signal.SIGKILL)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
