"""The one interface every training launcher implements (local torchrun-style, PyTorchJob, TrainJob).

With the contract between launchers and the worker: the exit code that means "do not restart", and the
file a failing rank leaves its error in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

# A worker exits with this code when a restart would fail the same way (bad input or config, a non-finite
# loss); any other failure (a crash, a lost peer, a killed pod) may be restarted from the latest checkpoint.
PERMANENT_FAILURE_EXIT_CODE = 2
# Rank 0 writes its result here, beside the checkpoints; the launching step reads it back.
RESULT_FILE = "train_result.json"

# A launcher may set this to a file path per rank; a failing worker writes its error there as JSON.
ERROR_FILE_ENV = "CTPIPE_ERROR_FILE"


@dataclass
class WorkerLaunch:
    """What to run on every rank; a launcher decides where (local processes or pods)."""

    # Deterministic per pipeline run and task, so a retried step re-attaches to the same job.
    job_name: str
    world_size: int
    # The full worker argv, e.g. ["python", "-m", "components.training.worker", "--snapshot", ...].
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # The launcher gives up (and deletes/kills the job) after this many seconds.
    deadline_seconds: int = 3600


class Launcher(Protocol):
    def run(self, launch: WorkerLaunch) -> None:
        """Run the job to completion; raise components.errors.TrainingError when it fails or times out."""
        ...
