"""How ``ctpipe run`` adjusts KFP's local runner (kfp 2.17): each step's output is decoded leniently.

``kfp.local.subprocess_task_handler.run_local_subprocess`` reads a step's output as strict UTF-8 text:
the first byte that is not (a C library's message, a user's model printing raw bytes) raised
UnicodeDecodeError in ``ctpipe run`` and failed the run, the step's pipe closed under it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator


def run_step_process(full_command: list[str], env_vars: dict[str, str] | None = None) -> int:
    """kfp's ``run_local_subprocess``, with a byte that is not UTF-8 replaced instead of raising."""
    env = {**os.environ, **env_vars} if env_vars else None
    with subprocess.Popen(
        full_command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding="utf-8",
        errors="replace",
        bufsize=1,
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, ""):
            print(line, end="")
        print("\n")  # as kfp: a blank line after each step's output
        return process.wait()


@contextlib.contextmanager
def step_output_decoded_leniently() -> Iterator[None]:
    """While in this block, KFP's local runner starts steps with ``run_step_process``."""
    from kfp.local import subprocess_task_handler

    original = subprocess_task_handler.run_local_subprocess
    subprocess_task_handler.run_local_subprocess = run_step_process
    try:
        yield
    finally:
        subprocess_task_handler.run_local_subprocess = original
