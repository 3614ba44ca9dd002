"""The learning-rate schedule: linear warmup, then cosine decay to ``min_lr_ratio``, per optimizer step."""

from __future__ import annotations

import math

import torch


def lr_multiplier(step: int, *, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> float:
    """The factor on the base learning rate used by optimizer step ``step`` (0-based)."""
    if step < warmup_steps:
        # (step + 1) so that the very first step already moves the weights.
        return (step + 1) / warmup_steps
    decay_steps = max(max_steps - warmup_steps, 1)
    progress = min((step - warmup_steps) / decay_steps, 1.0)
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_scheduler(
    optimizer: torch.optim.Optimizer, *, warmup_steps: int, max_steps: int, min_lr_ratio: float
) -> torch.optim.lr_scheduler.LambdaLR:
    """A LambdaLR stepped once per optimizer step; its state (last_epoch) goes into checkpoints."""

    def factor(step: int) -> float:
        return lr_multiplier(step, warmup_steps=warmup_steps, max_steps=max_steps, min_lr_ratio=min_lr_ratio)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
