"""Fault injection for ctpipe's tests and benchmarks: hooks (``components/lib/hooks.py``) that fail on purpose.

The pipeline never imports this module: it loads ``FaultHooks`` by name when one of the variables below is
set (or ``CTPIPE_HOOKS=ctpipe.testing.faults:FaultHooks``). They serve the tests (tests/components/steps/train/,
tests/components/steps/register/test_faults.py, the fake cluster of tests/fakes/), the end-to-end run and the
fault soak (benchmarks/soak.py); never a user config. Unset, nothing here runs.

``CTPIPE_TEST_FAULT`` makes one training rank fail in a chosen way at a chosen step: ``nan@STEP`` makes the
loss NaN at optimizer step STEP (0-based), ``raise@STEP:RANK`` raises on RANK at STEP, ``exit@STEP:RANK``
kills RANK abruptly at STEP, ``kill@STEP:RANK`` sends RANK a SIGKILL at STEP (as the OOM killer does),
``save_crash@STEP:RANK`` kills RANK in the middle of the checkpoint save of STEP (after its shards, before the
completion marker), ``marked_crash@STEP:RANK`` kills RANK just after the save of STEP is marked complete
(before retention and index.json), ``tracking_lost@STEP:RANK`` points RANK's MLflow tracker at a closed port
once training ended at STEP (an MLflow outage after training: every later call is refused, as by a stopped
server). Without ``:RANK`` every rank is hit. With ``CTPIPE_TEST_FAULT_WHEN=NAME=VALUE`` only a process whose
environment has ``NAME=VALUE`` is hit (one tuning trial, by its ``KUBEFLOW_TRAINER_OPT_*`` value).

``CTPIPE_TEST_STEP_FAULT=disk_full@STEP`` (e.g. ``disk_full@register``): while step STEP runs and records its
outcome, every write through Python's ``open`` (the project's own files, MLflow's staging, ``torch.save``)
fails with ENOSPC after the file is created, as on a full disk (the file exists, its bytes never arrive).

``CTPIPE_TEST_REGISTRATION_FAULT=POINT`` sends the registering process a SIGKILL at POINT of a registration:
``after_artifacts`` (artifacts logged, no version yet), ``after_create`` (the version exists with all its
tags, no alias yet), ``in_promotion_lock`` (holding the promotion lock, the champion not yet judged),
``after_alias`` (the champion alias moved, its stack and history not yet written).
"""

from __future__ import annotations

import builtins
import errno
import io
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from ctpipe.components.engine.hooks import TrainingHooks
from ctpipe.components.lib.hooks import StepHooks

FAULT_ENV = "CTPIPE_TEST_FAULT"
FAULT_WHEN_ENV = "CTPIPE_TEST_FAULT_WHEN"
STEP_FAULT_ENV = "CTPIPE_TEST_STEP_FAULT"
REGISTRATION_FAULT_ENV = "CTPIPE_TEST_REGISTRATION_FAULT"
_WRITE_MODES = set("wax+")


@dataclass
class Fault:
    """The fault ``CTPIPE_TEST_FAULT`` names (none when unset)."""

    kind: str = ""
    step: int = -1
    rank: int | None = None

    @classmethod
    def from_env(cls) -> Fault:
        spec = os.environ.get(FAULT_ENV, "")
        name, _, value = os.environ.get(FAULT_WHEN_ENV, "").partition("=")
        if not spec or (name and os.environ.get(name) != value):
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


def _nan_loss(logits: Any, y: Any) -> Any:
    import torch.nn.functional as F  # here: a step that only meets a full disk need not load torch

    return F.cross_entropy(logits, y) * float("nan")


class _FullDiskFile:
    """A file opened for writing on a full disk: created, but every write fails."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writelines = write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)


@contextmanager
def injected_step_fault(step: str) -> Iterator[None]:
    """Inside the block, the fault ``CTPIPE_TEST_STEP_FAULT`` names for ``step``, if any."""
    kind, _, target = os.environ.get(STEP_FAULT_ENV, "").partition("@")
    if kind != "disk_full" or target != step:
        yield
        return
    real_open = builtins.open

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        return _FullDiskFile(handle) if _WRITE_MODES & set(mode) else handle

    builtins.open = io.open = full_disk_open
    try:
        yield
    finally:
        builtins.open = io.open = real_open


def fault_point(name: str) -> None:
    """Die here, abruptly, when ``CTPIPE_TEST_REGISTRATION_FAULT`` names this point."""
    if os.environ.get(REGISTRATION_FAULT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


class FaultHooks(TrainingHooks, StepHooks):
    """The hooks that fire the faults the variables above name (read when the hooks are loaded)."""

    def __init__(self) -> None:
        self.fault = Fault.from_env()

    def before_step(self, step: int, rank: int) -> None:
        self.fault.before_step(step, rank)

    def loss_fn(self, step: int, rank: int, loss_fn: Callable) -> Callable:
        return self.fault.loss_fn(step, rank, loss_fn)

    def before_marker(self, step: int, rank: int) -> Callable[[], None] | None:
        return self.fault.save_crash(step, rank)

    def after_marker(self, step: int, rank: int) -> None:
        self.fault.after_marker(step, rank)

    def after_training(self, step: int, rank: int, tracker: object) -> None:
        self.fault.tracking_lost(step, rank, tracker)

    def running(self, step: str) -> AbstractContextManager[None]:
        return injected_step_fault(step)

    def at(self, point: str) -> None:
        fault_point(point)
