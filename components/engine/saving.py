"""Checkpoints written off the step's critical path: the state is staged (copied) when the save starts, and the write runs
in a background thread across as many of the next steps as it takes.

    writer = CheckpointWriter()             # a gloo group of its own for the save's collectives (collective)
    writer.start(write)                     # after a step: ``write()`` runs in a background thread
    ...                                     # the next steps: forward, backward, clipping, updates
    writer.finish()                         # before the next save starts (``start`` does it) and at the end

What a save writes is a copy taken when it starts (``saveable_state``): the updates and forwards after it (parameters,
optimizer state, a BatchNorm's running statistics) change the originals, not the copy, so no step waits for the
write; only the next save (at most one in flight) and the end of the run do. On the CPU the copy is a clone (about
1 ms for the demo model); on an accelerator DCP's ``BlockingAsyncStager`` copies to host memory, pinned and
reused from save to save, as ``dcp.async_save`` stages. A rank lost while a save is in flight loses that save (no
marker: resume never reads it) and resume takes the checkpoint before it, bit for bit. The save's collectives
(DCP's plans, the digests to rank 0) run on the writer's own gloo group: the training's collectives on the default
group run in the other thread at that time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict


def saveable_state(model: nn.Module, optimizer: torch.optim.Optimizer, stager: Any = None) -> dict[str, Any]:
    """What a checkpoint holds (``{"model", "optim"}``, as DCP saves it), copied now, so training goes on while it is
    written: cloned on the CPU, staged to host memory by ``stager`` (DCP's) for accelerator tensors."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd}
    if stager is not None and any(p.device.type != "cpu" for p in model.parameters()):
        return stager.stage(state)
    return _cloned(state)


def _cloned(value: Any) -> Any:
    """``value`` with every tensor in it (a DTensor stays one, with its own shard) cloned."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cloned(v) for v in value)
    return value


def _timed(write: Callable[[], None]) -> float:
    start = time.perf_counter()
    write()
    return time.perf_counter() - start


class CheckpointWriter:
    """One save in flight at most, in a background thread; ``finish`` waits for it and re-raises its error."""

    def __init__(self) -> None:
        # Collective: every rank creates its writer at the same point of its start-up.
        self.group = dist.new_group(backend="gloo") if dist.is_available() and dist.is_initialized() else None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctpipe-checkpoint")
        self._pending: Future[float] | None = None
        self._stager: Any = None  # DCP's, made at the first save from an accelerator (pinned buffers, reused)
        self.write_seconds = 0.0  # the saves' own time, beside the steps

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    def stage(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        """The state to save, copied (``saveable_state``): call it when no save is in flight (a reused staging
        buffer may still be being written)."""
        self.finish()
        if self._stager is None and torch.cuda.is_available():
            from torch.distributed.checkpoint.staging import BlockingAsyncStager

            self._stager = BlockingAsyncStager(cache_staged_state_dict=True)
        return saveable_state(model, optimizer, self._stager)

    def start(self, write: Callable[[], None]) -> None:
        """Run ``write`` (one checkpoint's save) in the background, after the save in flight, if any, is done."""
        self.finish()
        self._pending = self._pool.submit(_timed, write)

    def raise_if_failed(self) -> None:
        """Raise the error of a save that has already failed, without waiting for one still writing (a full disk
        then stops the run at the next boundary, not a checkpoint interval later)."""
        if self._pending is not None and self._pending.done() and self._pending.exception() is not None:
            self.finish()

    def finish(self) -> float | None:
        """Wait for the save in flight; the seconds waited (None when there was none). Its error is raised here."""
        if self._pending is None:
            return None
        pending, self._pending = self._pending, None
        start = time.perf_counter()
        self.write_seconds += pending.result()
        return time.perf_counter() - start

    def abandon(self, timeout: float = 60.0) -> None:
        """On an error elsewhere: give the save in flight up to ``timeout`` to end (a complete one is kept), ignore
        how it ended."""
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result(timeout=timeout)
            except BaseException:  # noqa: BLE001 - the error that stops the run is the other one
                pass

    def close(self) -> None:
        """Release the thread (a save given up on by ``abandon`` is not waited for again)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
