"""Loss and accuracy on the FULL validation split, every rank scoring an equal, zero-weight-padded shard."""

from __future__ import annotations

import math

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from components.training.data import Split
from components.training.device import Dist

EVAL_BATCH = 2048


@torch.no_grad()
def evaluate(model: nn.Module, val: Split, d: Dist, autocast) -> dict[str, float]:
    """``val_loss`` and ``val_accuracy`` over all of ``val`` (a collective: every rank calls it)."""
    model.eval()
    n = len(val)
    per_rank = math.ceil(n / d.world_size)
    idx = torch.arange(d.rank * per_rank, (d.rank + 1) * per_rank)
    weight = (idx < n).to(torch.float64)
    idx = idx.clamp(max=n - 1)  # padding rows count with weight 0; every rank runs the same batches
    totals = torch.zeros(3, dtype=torch.float64, device=d.device)
    for start in range(0, per_rank, EVAL_BATCH):
        b_idx, w = idx[start : start + EVAL_BATCH], weight[start : start + EVAL_BATCH].to(d.device)
        x_num, x_cat, y = val.batch(b_idx, d.device)
        with autocast():
            logits = model(x_num, x_cat)
        losses = F.cross_entropy(logits.float(), y, reduction="none").double()
        totals[0] += (losses * w).sum()
        totals[1] += ((logits.argmax(dim=1) == y).double() * w).sum()
        totals[2] += w.sum()
    dist.all_reduce(totals)
    model.train()
    return {"val_loss": float(totals[0] / totals[2]), "val_accuracy": float(totals[1] / totals[2])}
