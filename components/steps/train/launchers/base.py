"""The one interface every training launcher implements (local torchrun-style, PyTorchJob, TrainJob).

With the contract between launchers and the worker: the exit code that means "do not restart", and the
file a failing rank leaves its error in.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

# A worker exits with this code when a restart would fail the same way (bad input or config, a non-finite
# loss); any other failure (a crash, a lost peer, a killed pod) may be restarted from the latest checkpoint.
PERMANENT_FAILURE_EXIT_CODE = 2
# Rank 0 writes its result here, beside the checkpoints; the launching step reads it back.
RESULT_FILE = "train_result.json"

# A launcher may set this to a file path per rank; a failing worker writes its error there as JSON.
ERROR_FILE_ENV = "CTPIPE_ERROR_FILE"
# A launcher may set this to a path it can read after the job (on the shared volume); a rank failing with
# PERMANENT_FAILURE_EXIT_CODE also writes its error there, since the code may not reach the launcher (under a
# TrainJob torchrun turns the worker's 2 into 1).
PERMANENT_FAILURE_FILE_ENV = "CTPIPE_PERMANENT_FAILURE_FILE"
PERMANENT_FAILURE_FILE = "permanent_failure.json"  # in the job's directory on the shared volume


def read_permanent_failure(path: Path | None) -> str | None:
    """The error a rank left at PERMANENT_FAILURE_FILE_ENV's path, as "rank N: Type: message"; None if none."""
    if path is None or not path.is_file():
        return None
    try:
        info = json.loads(path.read_text())
        return f"rank {info['rank']}: {info['type']}: {info['message']}"
    except (OSError, ValueError, KeyError, TypeError):
        return f"(unreadable: {path})"  # still written by a rank that failed for good


@dataclass
class WorkerLaunch:
    """What to run on every rank; a launcher decides where (local processes or pods)."""

    # Deterministic per pipeline run and task, so a retried step re-attaches to the same job.
    job_name: str
    world_size: int
    # The full worker argv, e.g. ["python", "-m", "ctpipe.components.steps.train.worker", "--snapshot", ...].
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # The launcher gives up (and deletes/kills the job) after this many seconds.
    deadline_seconds: int = 3600


class Launcher(Protocol):
    def run(self, launch: WorkerLaunch) -> None:
        """Run the job to completion; raise ctpipe.components.lib.errors.TrainingError when it fails or times out."""
        ...


@contextlib.contextmanager
def sigterm_raises(error: Callable[[int], BaseException], *, once: bool = False) -> Iterator[None]:
    """While in this block, SIGTERM (KFP cancels a step by terminating it) raises ``error(signum)`` in the
    main thread, so the launcher unwinds through its clean-up (stop the ranks, delete the job).

    ``once``: later SIGTERMs are ignored, so that they cannot interrupt the clean-up the first one started.
    Elsewhere than the main thread (where Python delivers signals) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if once:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise error(signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
