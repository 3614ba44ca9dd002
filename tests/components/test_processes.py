"""``ctpipe.components.lib.processes`` on real child processes: liveness (a zombie is gone), the tree below a pid, waiting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from ctpipe.components.lib.processes import descendants, pid_alive, signal_quietly, wait_gone


def test_a_child_is_alive_then_gone_once_killed_even_before_it_is_waited_for():
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert pid_alive(child.pid) and child.pid in descendants(os.getpid(), leave_out=set())
        signal_quietly(child.pid, signal.SIGKILL)
        assert wait_gone([child.pid], 5)  # a zombie until waited for: not alive
    finally:
        child.kill()
        child.wait()
    signal_quietly(child.pid, signal.SIGTERM)  # gone and waited for: no error
    assert not pid_alive(child.pid)


def test_descendants_leave_out_a_process_and_everything_below_it():
    script = "import subprocess, sys; subprocess.Popen(['sleep', '30']); sys.stdout.write('x\\n'); sys.stdout.flush(); input()"
    parent = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline() == "x\n"
        below = descendants(parent.pid, leave_out=set())
        assert len(below) == 1
        assert set(descendants(os.getpid(), leave_out=set())) >= {parent.pid, *below}
        assert not set(descendants(os.getpid(), leave_out={parent.pid})) & {parent.pid, *below}
        assert not wait_gone(below, 0.1)
    finally:
        for pid in descendants(parent.pid, leave_out=set()):
            signal_quietly(pid, signal.SIGKILL)
        parent.kill()
        parent.wait()
