"""End to end: a step that prints bytes that are not UTF-8 does not break `ctpipe run`.

KFP's local runner decodes each step's output strictly: the first such byte (a C library's message, a
user's model printing raw bytes) raised UnicodeDecodeError in `ctpipe run`, and the step, its output
pipe closed, failed with "Broken pipe".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TASK = '''
import sys
from ctpipe.components.tasks.tabular import make_task


def factory(**options):
    sys.stdout.buffer.write(b"\\xff\\xfe: not UTF-8\\n")
    sys.stdout.flush()
    return make_task(**options)
'''


def test_a_step_printing_bytes_that_are_not_utf8_runs_to_the_end(tmp_path: Path):
    data = tmp_path / "data"
    write_demo_data(data, days=2, rows_per_day=300, seed=1)
    (tmp_path / "noisy_task.py").write_text(TASK)
    result = subprocess.run(
        [sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--data", str(data), "--home", str(tmp_path / "home"),
         "--set", "task.entrypoint=noisy_task:factory", "--set", "data.key=customer_id",
         "--set", "train.max_steps=20", "--set", "train.warmup_steps=5",
         "--set", "evaluate.thresholds.accuracy.value=0.3"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
             "MLFLOW_DISABLE_TELEMETRY": "true"},
        capture_output=True,
        timeout=600,
    )
    out = result.stdout.decode(errors="replace")
    summary = json.loads(Path(out.strip().splitlines()[-1]).read_text())
    assert summary["error"] is None, summary["error"]
    assert result.returncode == 0 and summary["status"] == "succeeded"
