"""What the terminal shows during ``ctpipe run``: one line per step as it starts and ends; the rest goes to a log.

    with output_to(run_dir / "pipeline.log") as terminal, StepProgress(status_dir, terminal, quiet):
        ...  # run the pipeline
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctpipe.pipelines.local.run_summary import read_step_records

STEP_TITLES = {
    "prepare_run": "prepare run (config, MLflow run)",
    "validate_data": "validate data (fingerprint, splits, Great Expectations)",
    "sanity_checks": "sanity checks (init loss, overfit one batch, ...)",
    "train": "train (FSDP2, torch.distributed)",
    "select_checkpoint": "select best checkpoint",
    "evaluate": "evaluate against champion",
    "register": "register in MLflow",
}


class StepProgress:
    """Prints one line per step as it starts and ends, from the status records the steps write."""

    def __init__(self, status_dir: Path, out, quiet: bool) -> None:
        self.status_dir = status_dir
        self.out = out
        self.quiet = quiet
        self.seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _emit(self, text: str) -> None:
        if not self.quiet:
            self.out.write(text + "\n")
            self.out.flush()

    def poll(self) -> None:
        from ctpipe.pipelines.continuous_training import STEP_NAMES

        records = read_step_records(self.status_dir)
        for index, step in enumerate(STEP_NAMES, start=1):
            status = records.get(step, {}).get("status")
            if status is None or self.seen.get(step) == status:
                continue
            self.seen[step] = status
            label = f"[{index}/{len(STEP_NAMES)}] {STEP_TITLES[step]}"
            if status == "running":
                self._emit(f"{label} ...")
            else:
                seconds = records[step].get("seconds", 0.0)
                mark = "passed" if status == "passed" else "FAILED"
                self._emit(f"{label}: {mark} in {seconds:.1f}s")

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self.poll()

    def __enter__(self) -> StepProgress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()


@contextlib.contextmanager
def output_to(log_path: Path) -> Iterator[Any]:
    """Send this process's (and its children's) stdout/stderr to a log; yield a writer to the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()
