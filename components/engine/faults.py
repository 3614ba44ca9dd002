"""The TEST-ONLY fault hook: ``CTPIPE_TEST_FAULT`` makes one rank fail in a chosen way at a chosen step.

It serves the tests (tests/components/steps/train/, the fake cluster of tests/fakes/k8s_api.py) and the fault
soak (benchmarks/soak.py); it is never part of a user config, and unset it costs nothing.

``nan@STEP`` makes the loss NaN at optimizer step STEP (0-based), ``raise@STEP:RANK`` raises on RANK at
STEP, ``exit@STEP:RANK`` kills RANK abruptly at STEP, ``kill@STEP:RANK`` sends RANK a SIGKILL at STEP (as
the OOM killer does), ``save_crash@STEP:RANK`` kills RANK in the middle of the checkpoint save of STEP
(after its shards, before the completion marker), ``marked_crash@STEP:RANK`` kills RANK just after the
save of STEP is marked complete (before retention and index.json), ``tracking_lost@STEP:RANK`` points RANK's
MLflow tracker at a closed port once training ended at STEP (an MLflow outage after training: every later
call is refused, as by a stopped server). Without ``:RANK`` every rank is hit.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

FAULT_ENV = "CTPIPE_TEST_FAULT"


@dataclass
class Fault:
    """The fault ``CTPIPE_TEST_FAULT`` names (none when unset)."""

    kind: str = ""
    step: int = -1
    rank: int | None = None

    @classmethod
    def from_env(cls) -> Fault:
        spec = os.environ.get(FAULT_ENV, "")
        if not spec:
            return cls()
        kind, _, where = spec.partition("@")
        step, _, rank = where.partition(":")
        return cls(kind, int(step), int(rank) if rank else None)

    def hits(self, kind: str, step: int, rank: int) -> bool:
        return self.kind == kind and self.step == step and self.rank in (None, rank)

    def before_step(self, step: int, rank: int) -> None:
        """``raise``, ``exit`` and ``kill``: fail here, before optimizer step ``step``."""
        if self.hits("raise", step, rank):
            raise RuntimeError(f"injected failure on rank {rank} at step {step} ({FAULT_ENV})")
        if self.hits("exit", step, rank):
            os._exit(17)
        if self.hits("kill", step, rank):
            os.kill(os.getpid(), signal.SIGKILL)

    def loss_fn(self, step: int, rank: int, loss_fn: Callable) -> Callable:
        """``nan``: the step's loss function, made to return NaN."""
        return _nan_loss if self.hits("nan", step, rank) else loss_fn

    def save_crash(self, step: int, rank: int) -> Callable[[], None] | None:
        """``save_crash``: what the save of ``step`` calls between the shards and the completion marker."""
        return (lambda: os._exit(18)) if self.hits("save_crash", step, rank) else None

    def after_marker(self, step: int, rank: int) -> None:
        """``marked_crash``: die once the save of ``step`` is complete, before its retention and index."""
        if self.hits("marked_crash", step, rank):
            os._exit(19)


    def tracking_lost(self, step: int, rank: int, tracker: object) -> None:
        """``tracking_lost``: from here on, the tracker's MLflow calls meet a server that is down."""
        if self.hits("tracking_lost", step, rank) and hasattr(tracker, "client"):
            import mlflow

            tracker.client = mlflow.MlflowClient(tracking_uri=f"http://127.0.0.1:{_closed_port()}")


def _closed_port() -> int:
    """A local TCP port nothing listens on (bound, then released): connections to it are refused."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nan_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits, y) * float("nan")
