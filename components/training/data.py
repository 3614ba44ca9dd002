"""The training rows as tensors, and the order in which each rank visits them.

Every rank draws from a ``DistributedSampler`` with the same seed (different seeds would overlap the
shards) and ``set_epoch`` each epoch; ``rank_order`` is that draw, the one place it is made, so the
first batch the sanity gate shows (``first_batch_indices``) is the one rank 0 trains on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pandas as pd
import torch

from components.errors import ConfigError


@dataclass
class Split:
    """One split's encoded features and labels as host tensors."""

    x_num: torch.Tensor
    x_cat: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, idx: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, ...]:
        parts = (self.x_num[idx], self.x_cat[idx], self.y[idx])
        if device.type == "cpu":
            return parts
        # As DataLoader(pin_memory=True) does: page-locked batches copy to the GPU asynchronously.
        return tuple(p.pin_memory().to(device, non_blocking=True) for p in parts)


def split_batches(snapshot, split: str) -> Iterator[pd.DataFrame]:
    """The ``split`` rows of a snapshot as DataFrame record batches (one Parquet row group each), in order.

    The one place training reads rows: whatever turns rows into model inputs works batch by batch, so
    no rank ever holds a split as one DataFrame (only its encoded tensors).
    """
    return snapshot.batches(split)


def load_split(snapshot, split: str) -> Split:
    """The ``split`` rows of a loaded snapshot, encoded as training encodes them, a record batch at a time."""
    from components.data.snapshot import encode_features, encode_labels

    prep, label = snapshot.preprocessing, snapshot.schema.label
    n = snapshot.rows(split)
    x_num = torch.empty((n, len(prep.numeric)), dtype=torch.float32)
    x_cat = torch.empty((n, len(prep.categorical)), dtype=torch.int64)
    y = torch.empty(n, dtype=torch.int64)
    start = 0
    for batch in split_batches(snapshot, split):
        num, cat = encode_features(batch, prep)
        end = start + len(batch)
        x_num[start:end], x_cat[start:end] = torch.tensor(num), torch.tensor(cat)  # copies: views may be read-only
        y[start:end] = torch.tensor(encode_labels(batch, label, prep.classes))
        start = end
    return Split(x_num, x_cat, y)


def _sampler(n: int, *, rank: int, world_size: int, seed: int):
    from torch.utils.data import DistributedSampler

    return DistributedSampler(range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True)


def rank_order(n: int, *, rank: int, world_size: int, seed: int, epoch: int) -> torch.Tensor:
    """The row indices ``rank`` visits in ``epoch``, in order (its shard of a seeded shuffle of ``n`` rows)."""
    sampler = _sampler(n, rank=rank, world_size=world_size, seed=seed)
    sampler.set_epoch(epoch)
    return torch.tensor(list(iter(sampler)), dtype=torch.long)


def first_batch_indices(n: int, *, batch_size: int, world_size: int, seed: int) -> list[int]:
    """Row indices of rank 0's first batch, as the trainer draws it (fewer when its shard is smaller)."""
    return rank_order(n, rank=0, world_size=world_size, seed=seed, epoch=0)[:batch_size].tolist()


class BatchStream:
    """Per-rank micro-batches in ``rank_order``, epoch after epoch.

    The position (epoch, batch within the epoch) is part of every checkpoint, so resume continues with
    exactly the batches an uninterrupted run would have seen.
    """

    def __init__(self, n: int, *, batch_size: int, rank: int, world_size: int, seed: int) -> None:
        self.n, self.rank, self.world_size, self.seed = n, rank, world_size, seed
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

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None
