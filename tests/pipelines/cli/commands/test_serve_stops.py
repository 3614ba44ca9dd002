"""`ctpipe serve` returns only once its scoring server's whole session is gone: MLflow's server starts workers that
hold the port after their parent has exited, and a `ctpipe serve` started again at once would find it taken."""

from __future__ import annotations

import os
import subprocess
import time

from ctpipe.pipelines.cli.commands.serve import _stop_group


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_worker_that_outlives_its_parent_is_waited_for():
    # The leader exits at once; its worker (same session) goes on for a moment, as a uvicorn worker shutting down.
    leader = subprocess.Popen(["sh", "-c", "sleep 0.6 & exit 0"], start_new_session=True)
    leader.wait()
    assert _alive(leader.pid)
    started = time.monotonic()
    _stop_group(leader.pid)
    assert not _alive(leader.pid) and time.monotonic() - started >= 0.3


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_period():
    leader = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 30 & exit 0"], start_new_session=True)
    leader.wait()
    _stop_group(leader.pid, grace=0.5)
    deadline = time.monotonic() + 5
    while _alive(leader.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(leader.pid)
