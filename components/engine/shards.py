"""Each rank's shard of a large train split, read from the snapshot's Parquet row groups only.

Above ``train.in_memory_rows`` train rows (and for a task with ``rowwise_encoding``) no rank holds the
whole split. Each epoch every rank draws the same seeded permutation of the row groups
(``torch.randperm`` with a generator seeded ``seed + epoch``, as ``DistributedSampler.set_epoch`` seeds
its row permutation), lays the permuted groups end to end and takes the contiguous slice
``[rank * per_rank, (rank + 1) * per_rank)`` of that sequence, ``per_rank = n // world_size``; it reads
only the row groups that slice touches (at most two of them partly) and shuffles its rows with the same
generator. So every rank gets exactly ``n // world_size`` rows, as ``DistributedSampler(drop_last=True)``
gives, and the ranks run equal batch counts (FSDP collectives would hang otherwise). Dropped each epoch:
the ``n % world_size`` rows at the end of the permuted sequence (which ones changes with the epoch), then
as on the in-memory path each rank's last ``per_rank % batch_size`` rows after its full batches.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch

from ctpipe.components.lib.data.split_files import SplitGroups
from ctpipe.components.tasks.protocol import Batch
from ctpipe.components.tasks.spec import TaskSpec


def group_sizes(path: str | Path) -> list[int]:
    """Rows in each row group of a split (one file, or the Spark engine's folder of part files), from the footers."""
    return list(SplitGroups(path).sizes)


def shard_positions(sizes: list[int], *, rank: int, world_size: int, seed: int, epoch: int) -> torch.Tensor:
    """The split-file row positions ``rank`` visits in ``epoch``, in order (see the module docstring)."""
    n = int(sum(sizes))
    per_rank = n // world_size
    g = torch.Generator()
    g.manual_seed(seed + epoch)
    perm = torch.randperm(len(sizes), generator=g).tolist()
    starts = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64)
    lo, hi = rank * per_rank, (rank + 1) * per_rank
    pieces, offset = [], 0  # offset: where the current group begins in the permuted sequence
    for group in perm:
        size = sizes[group]
        a, b = max(lo, offset), min(hi, offset + size)
        if a < b:
            first = starts[group] + (a - offset)
            pieces.append(np.arange(first, first + (b - a), dtype=np.int64))
        offset += size
        if offset >= hi:
            break
    positions = torch.from_numpy(np.concatenate(pieces)) if pieces else torch.empty(0, dtype=torch.long)
    return positions[torch.randperm(len(positions), generator=g)]


class ShardedSplit:
    """One rank's encoded rows of the train split for one epoch at a time, read by row group.

    ``load(epoch)`` returns the examples in visit order (``shard_positions``); the previous epoch's are
    released first. ``rows_read`` / ``rows_encoded`` / ``load_seconds`` count what this rank read.
    """

    def __init__(self, path: str | Path, task: TaskSpec, state: dict, *, rank: int, world_size: int, seed: int) -> None:
        self.path, self.task, self.state = Path(path), task, state
        self.rank, self.world_size, self.seed = rank, world_size, seed
        self.sizes = group_sizes(self.path)
        self.n = int(sum(self.sizes))
        self.rows_per_rank = self.n // world_size
        self.rows_read = self.rows_encoded = 0
        self.load_seconds = 0.0

    def positions(self, epoch: int) -> torch.Tensor:
        return shard_positions(self.sizes, rank=self.rank, world_size=self.world_size, seed=self.seed, epoch=epoch)

    def load(self, epoch: int) -> Batch:
        """This rank's examples of ``epoch`` in visit order; only the row groups holding them are read."""
        start = time.perf_counter()
        batch, read = encode_rows(self.path, self.task, self.state, self.positions(epoch).numpy(), self.sizes)
        self.rows_read += read
        self.rows_encoded += len(batch)
        self.load_seconds += time.perf_counter() - start
        return batch

    def targets(self) -> torch.Tensor:
        """Every train row's target in file order (for the task's ``init_model``, the same on every rank):
        the split streamed a row group at a time, only the targets kept (8 bytes a row for class labels),
        and of each row group only the columns the task's ``target_columns`` names."""
        groups = SplitGroups(self.path)
        columns = self.task.codec.target_columns(self.state)
        parts = [torch.tensor(np.asarray(self.task.codec.targets(groups.read(g, columns=columns), self.state)))
                 for g in range(len(groups.sizes))]
        return torch.cat(parts) if parts else torch.empty(0, dtype=torch.long)

    def example(self, rows: int = 8) -> Batch:
        """The first ``rows`` rows of the file, encoded (the model's example input for counting FLOPs)."""
        frame = SplitGroups(self.path).read(0).iloc[:rows]
        return self.task.codec.encode(frame.reset_index(drop=True), self.state)


def encode_rows(path: str | Path, task: TaskSpec, state: dict, positions: np.ndarray,
                sizes: list[int] | None = None) -> tuple[Batch, int]:
    """The rows at ``positions`` of a split file encoded by a row-wise task, in that order, and how many
    rows were read: only the row groups holding them, one at a time, in file order."""
    sizes = group_sizes(path) if sizes is None else sizes
    starts = np.concatenate([[0], np.cumsum(sizes)])[:-1].astype(np.int64)
    group_of = np.searchsorted(starts, positions, side="right") - 1
    groups = SplitGroups(path)
    inputs: list[torch.Tensor] = []
    targets = torch.empty(0)
    read = 0
    for group in np.unique(group_of):
        slots = np.flatnonzero(group_of == group)
        frame = groups.read(int(group))
        read += len(frame)
        part = task.codec.encode(frame.iloc[positions[slots] - starts[group]].reset_index(drop=True), state)
        if not inputs:
            inputs = [torch.empty((len(positions), *x.shape[1:]), dtype=x.dtype) for x in part.inputs]
            targets = torch.empty((len(positions), *part.targets.shape[1:]), dtype=part.targets.dtype)
        index = torch.from_numpy(slots)
        for whole, x in zip(inputs, part.inputs, strict=True):
            whole[index] = x
        targets[index] = part.targets
    return Batch(tuple(inputs), targets), read
