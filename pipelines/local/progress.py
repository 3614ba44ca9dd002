"""What the terminal shows during ``ctpipe run``: each step as it starts and ends, and training's progress.

    with output_to(run_dir / "pipeline.log") as terminal, StepProgress(status_dir, terminal, log_path=...):
        ...  # run the pipeline

Everything the steps print goes to the run's ``pipeline.log``; the terminal gets the step lines, the
training progress line that rank 0 prints each logging window (``ProgressLine``) and a long validation's
progress line (``WorkLine``: its streaming passes over many rows), rewritten in place on a terminal and
printed every ``PRINT_EVERY_SECONDS`` (or each quarter of the work) otherwise. ``--verbose``
echoes the whole log too; ``--quiet`` prints nothing until the summary.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctpipe.components.engine.progress import ProgressLine
from ctpipe.components.lib.work_progress import WorkLine
from ctpipe.pipelines.local.kfp_local_patches import ANSI_CODES
from ctpipe.pipelines.local.run_summary import read_step_records

PRINT_EVERY_SECONDS = 10.0  # the training line's period when the terminal is not a TTY (a CI log, a pipe)

STEP_TITLES = {
    "prepare_run": "prepare run (config, MLflow run)",
    "validate_data": "validate data (fingerprint, splits, Great Expectations)",
    "sanity_checks": "sanity checks (init loss, overfit one batch, ...)",
    "tune": "tune hyperparameters (trials as training jobs, judged on validation)",
    "train": "train (FSDP2, torch.distributed)",
    "select_checkpoint": "select best checkpoint",
    "evaluate": "evaluate against champion",
    "register": "register in MLflow",
}


class StepProgress:
    """Prints each step as it starts and ends (from the steps' status records) and training's progress line."""

    def __init__(self, status_dir: Path, out, verbosity: int = 0, *, log_path: Path | None = None,
                 steps: tuple[str, ...] | None = None) -> None:
        from ctpipe.pipelines.continuous_training import STEP_NAMES

        self.steps = steps or STEP_NAMES  # the pipeline's steps (with tune when it has one)
        self.status_dir = status_dir
        self.out = out
        self.quiet = verbosity < 0
        self.verbose = verbosity > 0
        self.seen: dict[str, str] = {}
        self._log = LogTail(log_path) if log_path is not None else None
        self._tty = bool(getattr(out, "isatty", lambda: False)())
        self._progress: ProgressLine | WorkLine | None = None
        self._progress_shown: tuple[float, tuple[str, int]] | None = None  # (when, _position) last printed
        self._in_place = False  # a progress line is on the terminal without its newline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _emit(self, text: str) -> None:
        if not self.quiet:
            if self._in_place:
                self.out.write("\n")
                self._in_place = False
            self.out.write(text + "\n")
            self.out.flush()

    def _show_progress(self, final: bool = False) -> None:
        """The progress line: in place on a TTY; otherwise every PRINT_EVERY_SECONDS or quarter of the work."""
        line = self._progress
        if line is None or self.quiet:
            return
        now, last = time.monotonic(), self._progress_shown
        position = _position(line)
        if self._tty:
            if last is None or position != last[1]:
                self.out.write("\r" + line.text() + "\x1b[K")
                self.out.flush()
                self._in_place = True
                self._progress_shown = (now, position)
            return
        due = (last is None or final or now - last[0] >= PRINT_EVERY_SECONDS or position[0] != last[1][0]
               or position[1] - last[1][1] >= max(line.total // 4, 1))
        if due and (last is None or position != last[1]):
            self._emit(line.text())
            self._progress_shown = (now, position)

    def _read_log(self) -> None:
        if self._log is None:
            return
        for raw in self._log.new_lines():
            line = ANSI_CODES.sub("", raw)
            if self.verbose:
                self._emit("  | " + line)
            elif line.lstrip().startswith("[tune] trial ") and " started: " not in line:  # the search's progress
                self._emit("      " + line.strip())
            progress = ProgressLine.parse(line) or WorkLine.parse(line)
            if progress is not None:
                self._progress = progress
                self._show_progress()

    def poll(self) -> None:
        self._read_log()
        records = read_step_records(self.status_dir)
        for index, step in enumerate(self.steps, start=1):
            status = records.get(step, {}).get("status")
            if status is None or self.seen.get(step) == status:
                continue
            self.seen[step] = status
            label = f"[{index}/{len(self.steps)}] {STEP_TITLES[step]}"
            if status == "running":
                self._emit(f"{label} ...")
            elif status == "cached":
                self._emit(f"{label}: reused from cache (data, config and code unchanged)")
            else:
                if self._progress is not None and _position(self._progress)[0].split(":")[0] == step:
                    self._show_progress(final=True)
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


def _position(line: ProgressLine | WorkLine) -> tuple[str, int]:
    """Which step's which pass a progress line reports, and how far it is (a line already shown is not again)."""
    if isinstance(line, ProgressLine):
        return "train", line.step
    return f"{line.step}:{line.doing}", line.done


class LogTail:
    """The complete lines appended to a file since the last call (a partial last line waits for its end)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = path.stat().st_size if path.exists() else 0
        self.partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as log:
                log.seek(self.offset)
                chunk = log.read()
        except FileNotFoundError:
            return []
        self.offset += len(chunk)
        *lines, self.partial = (self.partial + chunk).split(b"\n")
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]


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
