"""The training rows as tensors, and the order in which each rank visits them.

Every rank draws from a ``DistributedSampler`` with the same seed (different seeds would overlap the
shards) and ``set_epoch`` each epoch; ``rank_order`` is that draw, the one place it is made, so the
first batch the sanity gate shows (``first_batch_indices``) is the one rank 0 trains on. Above
``train.in_memory_rows`` train rows (``reads_shards``) a rank never loads the whole split: a
``ShardStream`` reads its shard of row groups each epoch (``shards.py``), and ``first_batch_indices``
follows that draw instead. ``train_stream`` picks the path.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import torch

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.tasks.protocol import Batch
from ctpipe.components.tasks.spec import TaskSpec


@dataclass
class Split:
    """One split's examples as host tensors: the task's encoding of its rows (``Task.encode``)."""

    examples: Batch

    def __len__(self) -> int:
        return len(self.examples)

    @property
    def targets(self) -> torch.Tensor:
        return self.examples.targets

    def batch(self, idx: torch.Tensor, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """``(inputs, targets)`` of the examples at ``idx`` on ``device``: ``model(*inputs)``."""
        part = self.examples.select(idx)
        if device.type == "cpu":
            return part.inputs, part.targets
        # As DataLoader(pin_memory=True) does: page-locked batches copy to the GPU asynchronously.
        inputs = tuple(x.pin_memory().to(device, non_blocking=True) for x in part.inputs)
        return inputs, part.targets.pin_memory().to(device, non_blocking=True)


def split_batches(snapshot, split: str) -> Iterator[pd.DataFrame]:
    """The ``split`` rows of a snapshot as DataFrame record batches (one Parquet row group each), in order.

    The one place training reads rows batch by batch: a task with ``rowwise_encoding`` is fed these, so
    no rank holds such a split as one DataFrame (only its encoded tensors).
    """
    return snapshot.batches(split)


def load_split(snapshot, split: str, task: TaskSpec) -> Split:
    """The ``split`` rows of a loaded snapshot, encoded by the task as training encodes them.

    A task whose encoding is row-wise (``rowwise_encoding``: one example per row) is fed one record batch
    at a time into preallocated tensors; any other (e.g. packing texts into sequences) gets the whole split,
    since encoding chunks separately would change its examples.
    """
    n = snapshot.rows(split)
    if not task.codec.rowwise or n == 0:
        return Split(task.codec.encode(snapshot.frame(split), snapshot.state))
    inputs: list[torch.Tensor] = []
    targets = torch.empty(0)
    start = 0
    for frame in split_batches(snapshot, split):
        part = task.codec.encode(frame, snapshot.state)
        if start == 0:
            inputs = [torch.empty((n, *x.shape[1:]), dtype=x.dtype) for x in part.inputs]
            targets = torch.empty((n, *part.targets.shape[1:]), dtype=part.targets.dtype)
        end = start + len(part)
        for whole, x in zip(inputs, part.inputs, strict=True):
            whole[start:end] = x
        targets[start:end] = part.targets
        start = end
    if start != n:
        raise ValueError(f"task {task.name!r} declares rowwise_encoding but encoded {start} examples from {n} rows")
    return Split(Batch(tuple(inputs), targets))


def _sampler(n: int, *, rank: int, world_size: int, seed: int):
    from torch.utils.data import DistributedSampler

    return DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)


def rank_order(n: int, *, rank: int, world_size: int, seed: int, epoch: int) -> torch.Tensor:
    """The row indices ``rank`` visits in ``epoch``, in order (its shard of a seeded shuffle of ``n`` rows)."""
    sampler = _sampler(n, rank=rank, world_size=world_size, seed=seed)
    sampler.set_epoch(epoch)
    return torch.tensor(list(iter(sampler)), dtype=torch.long)


def reads_shards(n: int, *, in_memory_rows: int, task: TaskSpec) -> bool:
    """Whether each rank reads only its shard of row groups (``shards.py``) rather than the whole split:
    above ``train.in_memory_rows`` train rows, for a task whose encoding is row-wise. Smaller splits keep
    the whole-split path, so their runs stay bit-identical to what they were."""
    return n > in_memory_rows and task.codec.rowwise


def first_batch_indices(n: int, *, batch_size: int, world_size: int, seed: int,
                        group_sizes: list[int] | None = None) -> list[int]:
    """Row indices of rank 0's first batch, as the trainer draws it (fewer when its shard is smaller);
    ``group_sizes`` (the train file's row groups) when training reads shards (``reads_shards``)."""
    if group_sizes is not None:
        from ctpipe.components.engine.shards import shard_positions

        return shard_positions(group_sizes, rank=0, world_size=world_size, seed=seed, epoch=0)[:batch_size].tolist()
    return rank_order(n, rank=0, world_size=world_size, seed=seed, epoch=0)[:batch_size].tolist()


class BatchStream:
    """Per-rank micro-batches in ``rank_order``, epoch after epoch.

    The position (epoch, batch within the epoch) is part of every checkpoint, so resume continues with
    exactly the batches an uninterrupted run would have seen. ``data`` (the whole split, encoded) gives
    ``next_batch`` its rows; a ``ShardStream`` reads each epoch's rows itself.
    """

    def __init__(self, n: int, *, batch_size: int, rank: int, world_size: int, seed: int,
                 data: Split | None = None) -> None:
        self.n, self.rank, self.world_size, self.seed, self.data = n, rank, world_size, seed, data
        rows_per_rank = len(_sampler(n, rank=rank, world_size=world_size, seed=seed))
        self.batch_size = batch_size
        self.batches_per_epoch = rows_per_rank // batch_size
        if self.batches_per_epoch == 0:
            raise ConfigError(
                f"invalid config value for 'train.batch_size': {batch_size} is larger than the {rows_per_rank} "
                f"training rows each of the {world_size} workers gets; lower train.batch_size or train.workers"
            )
        self.epoch, self.position = 0, 0
        self._order: torch.Tensor | None = None

    def next_indices(self) -> torch.Tensor:
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None
        if self._order is None:
            self._order = rank_order(
                self.n, rank=self.rank, world_size=self.world_size, seed=self.seed, epoch=self.epoch
            )
        start = self.position * self.batch_size
        self.position += 1
        return self._order[start : start + self.batch_size]

    def next_batch(self, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        """The next micro-batch's ``(inputs, targets)`` on ``device``."""
        assert self.data is not None, "BatchStream(data=...) is needed for next_batch"
        return self.data.batch(self.next_indices(), device)

    def read_stats(self) -> dict[str, float]:
        """What this rank read from the snapshot while training (none here: the split was loaded up front)."""
        return {}

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None


class ShardStream(BatchStream):
    """``BatchStream`` over a ``ShardedSplit``: each epoch this rank reads and encodes only its shard (in
    visit order), so ``next_indices`` walks it front to back. Same position state, same resume."""

    def __init__(self, shards, *, batch_size: int) -> None:
        super().__init__(shards.n, batch_size=batch_size, rank=shards.rank, world_size=shards.world_size,
                         seed=shards.seed)
        self.shards = shards
        self._epoch_data: Split | None = None
        self._loaded_epoch = -1

    def next_indices(self) -> torch.Tensor:
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        start = self.position * self.batch_size
        self.position += 1
        return torch.arange(start, start + self.batch_size)

    def next_batch(self, device: torch.device) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
        idx = self.next_indices()
        if self._loaded_epoch != self.epoch:
            self._epoch_data = None  # release the last epoch's shard before reading the next
            self._epoch_data, self._loaded_epoch = Split(self.shards.load(self.epoch)), self.epoch
        return self._epoch_data.batch(idx, device)

    def read_stats(self) -> dict[str, float]:
        return {"shard_rows_read": self.shards.rows_read, "shard_load_seconds": round(self.shards.load_seconds, 3)}


def train_stream(snapshot, task: TaskSpec, *, in_memory_rows: int, batch_size: int, rank: int, world_size: int,
                 seed: int) -> tuple[BatchStream, torch.Tensor, tuple[torch.Tensor, ...]]:
    """This rank's train batches (the whole split encoded, or above ``in_memory_rows`` a ``ShardStream``),
    every train row's target (for ``Task.init_model``, the same on every rank) and an 8-row example input."""
    from ctpipe.components.engine.shards import ShardedSplit

    if reads_shards(snapshot.rows("train"), in_memory_rows=in_memory_rows, task=task):
        shards = ShardedSplit(snapshot.root / "train.parquet", task, snapshot.state, rank=rank,
                              world_size=world_size, seed=seed)
        return ShardStream(shards, batch_size=batch_size), shards.targets(), shards.example(8).inputs
    data = load_split(snapshot, "train", task)
    stream = BatchStream(len(data), batch_size=batch_size, rank=rank, world_size=world_size, seed=seed, data=data)
    return stream, data.targets, tuple(x[:8] for x in data.examples.inputs)
