"""Loss and the task's metrics on the FULL validation split, every rank scoring an equal, zero-weight-padded shard."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch import nn

from components.tasks.protocol import Task
from components.training.data import Split
from components.training.device import Dist

EVAL_BATCH = 2048


@torch.no_grad()
def evaluate(model: nn.Module, val: Split, d: Dist, autocast, task: Task) -> dict[str, float]:
    """``val_loss`` and ``val_<metric>`` for the task's ``row_metrics`` over all of ``val`` (a collective:
    every rank calls it)."""
    model.eval()
    n = len(val)
    per_rank = math.ceil(n / d.world_size)
    idx = torch.arange(d.rank * per_rank, (d.rank + 1) * per_rank)
    weight = (idx < n).to(torch.float64)
    idx = idx.clamp(max=n - 1)  # padding rows count with weight 0; every rank runs the same batches
    names: list[str] | None = None
    totals = None
    for start in range(0, per_rank, EVAL_BATCH):
        b_idx, w = idx[start : start + EVAL_BATCH], weight[start : start + EVAL_BATCH].to(d.device)
        inputs, y = val.batch(b_idx, d.device)
        with autocast():
            logits = model(*inputs)
        per_row = {"loss": task.row_losses(logits.float(), y)} | task.row_metrics(logits, y)
        if totals is None:
            names = list(per_row)
            totals = torch.zeros(len(names) + 1, dtype=torch.float64, device=d.device)
        for k, name in enumerate(names):
            totals[k] += (per_row[name].double() * w).sum()
        totals[-1] += w.sum()
    dist.all_reduce(totals)
    model.train()
    return {f"val_{name}": float(totals[k] / totals[-1]) for k, name in enumerate(names)}
