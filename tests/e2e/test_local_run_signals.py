"""End to end: `ctpipe run` stopped by SIGTERM mid-training takes its steps and training ranks with it.

``kill PID`` (a supervisor, a CI job's timeout) signals `ctpipe run` alone, unlike Ctrl-C, which the
terminal sends to every process of the run. Every process of the run carries a marker in its
environment, so that the test finds those left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
MARKER_ENV = "CTPIPE_TEST_RUN_MARKER"


def _marked(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{MARKER_ENV}={marker}".encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def _train_running(home: Path) -> bool:
    for record in home.glob("runs/*/steps/train.json"):
        try:
            return json.loads(record.read_text()).get("status") == "running"
        except (OSError, ValueError):
            return False
    return False


@pytest.mark.parametrize("warm", ["0", "1"])
def test_sigterm_to_ctpipe_run_mid_training_stops_every_step_and_rank(tmp_path, warm):
    data = tmp_path / "data"
    write_demo_data(data, days=2, rows_per_day=300, seed=1)
    home, marker = tmp_path / "home", uuid.uuid4().hex
    run = subprocess.Popen(
        [sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--data", str(data), "--home", str(home),
         "--set", "data.key=customer_id", "--set", "train.max_steps=100000", "--set", "train.max_epochs=null",  # trains until signalled
         "--set", "train.deadline_seconds=600"],
        env={**os.environ, MARKER_ENV: marker, "CTPIPE_WARM_START": warm, "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while not _train_running(home) and time.monotonic() < deadline and run.poll() is None:
            time.sleep(0.2)
        assert _train_running(home), run.communicate(timeout=30)
        time.sleep(3)  # the ranks have started
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=60)
        time.sleep(5)  # what the run stops takes up to its grace period
        left = _marked(marker)
        assert left == [], f"processes of the run left running: {left}\n{err[-2000:]}"
        assert run.returncode in (-signal.SIGTERM, 128 + signal.SIGTERM), (run.returncode, out[-2000:], err[-2000:])
    finally:
        for pid in _marked(marker):
            os.kill(pid, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
