"""Loss and the task's metrics on the FULL validation split, every rank scoring an equal, zero-weight-padded shard.

Rank ``r`` scores rows ``[r * per_rank, (r + 1) * per_rank)`` of the ``n`` (``per_rank = ceil(n / world)``),
past the end padded with the split's last row at weight 0. ``val_shard`` loads only those rows when the
task encodes row-wise (a rank never holds the whole val split), else the whole split; the batches, and so
the metrics, are the same either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ctpipe.components.engine.data import Split
from ctpipe.components.engine.device import Dist
from ctpipe.components.tasks.registry import check_selection_metric
from ctpipe.components.tasks.spec import TaskSpec

EVAL_BATCH = 2048


@dataclass
class ValShard:
    """The encoded val rows ``[start, start + len(examples))`` of the ``n`` a rank needs to score its part."""

    examples: Split
    n: int
    start: int = 0

    def __len__(self) -> int:
        return self.n


def val_shard(snapshot, task: TaskSpec, d: Dist) -> ValShard:
    """This rank's val rows (row-wise tasks: only its range, read by row group), or the whole split."""
    from ctpipe.components.engine.data import load_split
    from ctpipe.components.engine.shards import encode_rows

    n = snapshot.rows("val")
    if not task.codec.rowwise or n == 0:
        whole = load_split(snapshot, "val", task)
        return ValShard(whole, len(whole))
    per_rank = math.ceil(n / d.world_size)
    start = min(d.rank * per_rank, n - 1)  # a rank past the end still needs the last row, as padding
    stop = max(min((d.rank + 1) * per_rank, n), start + 1)
    batch, _ = encode_rows(snapshot.root / "val.parquet", task, snapshot.state, np.arange(start, stop))
    return ValShard(Split(batch), n, start)


@torch.no_grad()
def evaluate(model: nn.Module, val: ValShard | Split, d: Dist, autocast, task: TaskSpec) -> dict[str, float]:
    """``val_loss`` and ``val_<metric>`` for the task's ``row_metrics`` over all of ``val`` (a collective:
    every rank calls it)."""
    model.eval()
    shard = val if isinstance(val, ValShard) else ValShard(val, len(val))
    n = shard.n
    per_rank = math.ceil(n / d.world_size)
    idx = torch.arange(d.rank * per_rank, (d.rank + 1) * per_rank)
    weight = (idx < n).to(torch.float64)
    idx = idx.clamp(max=n - 1)  # padding rows count with weight 0; every rank runs the same batches
    idx = idx - shard.start  # positions in the rows this rank loaded
    val = shard.examples
    names: list[str] | None = None
    totals = None
    for start in range(0, per_rank, EVAL_BATCH):
        b_idx, w = idx[start : start + EVAL_BATCH], weight[start : start + EVAL_BATCH].to(d.device)
        inputs, y = val.batch(b_idx, d.device)
        with autocast():
            logits = model(*inputs)
        per_row = {"loss": task.objective.row_losses(logits.float(), y)} | task.objective.row_metrics(logits, y)
        if totals is None:
            names = list(per_row)
            totals = torch.zeros(len(names) + 1, dtype=torch.float64, device=d.device)
        for k, name in enumerate(names):
            totals[k] += (per_row[name].double() * w).sum()
        totals[-1] += w.sum()
    dist.all_reduce(totals)
    model.train()
    return {f"val_{name}": float(totals[k] / totals[-1]) for k, name in enumerate(names)}


@torch.no_grad()
def check_reported(model: nn.Module, val: ValShard, d: Dist, autocast, task: TaskSpec, metric: str) -> None:
    """ConfigError unless ``evaluate`` reports ``metric`` (``select.metric``): the task's row metrics, from
    scoring a few of this rank's val rows (every rank calls it: under FSDP the forward is a collective).
    Otherwise the whole training would run, then fail. Eval mode and no grad draw no random numbers, so a
    resumed run stays bit-identical."""
    inputs, targets = val.examples.batch(torch.arange(min(8, len(val.examples))), d.device)
    model.eval()
    with autocast():
        names = task.objective.row_metrics(model(*inputs), targets)
    model.train()
    check_selection_metric(task, metric, names)
