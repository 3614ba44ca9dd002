"""The local launcher reads every byte a rank writes: a rank never blocks on a full output pipe."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.local import LocalLauncher

RANK = textwrap.dedent(
    """
    import sys
    out = sys.stdout.buffer
    out.write(b"\\xff\\xfe: bytes that are not UTF-8 (a C library, a user's model)\\n")
    out.flush()
    for i in range(20000):  # far more than a pipe holds
        out.write(b"line %d of the rank's output ........................................\\n" % i)
    out.write(b"rank done\\n")
    """
)


def test_a_rank_writing_bytes_that_are_not_utf8_and_much_output_finishes(tmp_path: Path):
    # Before: the output pump died on the first byte that was not UTF-8, the rank then blocked on its full
    # pipe, and the job was stopped at its deadline as if training had been too slow.
    script = tmp_path / "rank_bytes.py"
    script.write_text(RANK)
    started = time.monotonic()
    LocalLauncher(echo=False).run(
        WorkerLaunch(job_name="bytes", world_size=1, command=[sys.executable, str(script)], deadline_seconds=30)
    )
    assert time.monotonic() - started < 25
