"""A cancelled train step (SIGTERM, as KFP cancels a task) stops its local ranks before it exits.

Cold and warm: with a warm-start server the ranks are forked from it, and stopping them goes through
their clients.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.warm_start import running_server
from tests.fixtures.processes import gone_within

LAUNCH = textwrap.dedent(
    """
    import sys
    from ctpipe.components.steps.train.launchers.base import WorkerLaunch
    from ctpipe.components.steps.train.launchers.local import LocalLauncher

    rank_code = (
        "import os, sys, time; "
        "open(os.path.join(sys.argv[1], 'rank' + os.environ['RANK']), 'w').write(f'{os.getpid()} {os.getppid()}'); "
        "time.sleep(120)"
    )
    # A script, not `-c`: the form a warm start serves (`-m module` or a script path).
    script = sys.argv[1] + "/rank_sleeps.py"
    open(script, "w").write(rank_code)
    LocalLauncher(echo=False).run(
        WorkerLaunch(job_name="cancel-test", world_size=2, command=[sys.executable, script, sys.argv[1]])
    )
    """
)


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_sigterm_stops_the_ranks_and_exits_with_the_signal(tmp_path: Path, warm: bool):
    def launch() -> None:
        step = subprocess.Popen([sys.executable, "-c", LAUNCH, str(tmp_path)], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"rank{r}").is_file() and (tmp_path / f"rank{r}").read_text() for r in (0, 1)):
            assert step.poll() is None, step.stderr.read()
            assert time.monotonic() < deadline, "the ranks did not start"
            time.sleep(0.05)
        pids = [[int(x) for x in (tmp_path / f"rank{r}").read_text().split()] for r in (0, 1)]
        ranks, parents = [pid for pid, _ in pids], [parent for _, parent in pids]
        # Cold: the launcher's own children; warm: forked by the server.
        assert all((parent == step.pid) != warm for parent in parents), (parents, step.pid)
        step.send_signal(signal.SIGTERM)
        assert step.wait(timeout=30) == 128 + signal.SIGTERM
        for pid in ranks:
            assert gone_within(pid), f"rank process {pid} outlived its cancelled step"

    if warm:
        with running_server(preload=("ctpipe.components.steps.train.launchers.local",)) as server:
            assert server is not None
            launch()
    else:
        launch()
