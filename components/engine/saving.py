"""Checkpoints written beside the next step: a save overlaps that step's forward and backward, and is complete
before the step's optimizer update changes what the save writes.

    writer = CheckpointWriter()             # a gloo group of its own for the save's collectives (collective)
    writer.start(write)                     # after a step: ``write()`` runs in a background thread
    ...                                     # the next step's forward, backward and clipping
    writer.finish()                         # before its update (and at the end): waits, raises the save's error

Nothing a save reads changes before ``finish``: the sharded parameters and the optimizer's state change only in
the update, and the buffers (a BatchNorm's running statistics, which a forward changes) are copied when the save
starts (``saveable_state``). A save is therefore complete before the step after the next one begins: a rank lost
during the one overlapped step loses that save, as one lost during a synchronous save would (resume then takes
the checkpoint before it, bit for bit). The save's collectives (DCP's plans, the digests to rank 0) run on the
writer's own gloo group: the training's collectives on the default group run in the other thread at that time.
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

from ctpipe.components.engine.parallelize import unwrap


def saveable_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """What a checkpoint holds (``{"model", "optim"}``, as DCP saves it): the parameters and the optimizer's state as
    they are (the next update waits for the save), the buffers copied (the next forward changes them)."""
    model_sd, optim_sd = get_state_dict(model, optimizer)
    buffers = {name for name, _ in unwrap(model).named_buffers()}
    model_sd = {k: v.detach().clone() if k in buffers and isinstance(v, torch.Tensor) else v for k, v in model_sd.items()}
    return {"model": model_sd, "optim": optim_sd}


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
        self.write_seconds = 0.0  # the saves' own time, beside the steps

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    def start(self, write: Callable[[], None]) -> None:
        """Run ``write`` (one checkpoint's save) in the background, after the save in flight, if any, is done."""
        self.finish()
        self._pending = self._pool.submit(_timed, write)

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
