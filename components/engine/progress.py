"""A training run's counters: what survives a resume (``Progress``) and the current logging window.

``Progress`` is saved in every checkpoint's meta and restored by a resume; ``Window`` sums per-step
values between two all-reduced log lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ctpipe.components.engine import checkpointing as ckpt


@dataclass
class Progress:
    """Counters that survive a resume (saved in every checkpoint's meta)."""

    step: int = 0
    clipped_steps: int = 0
    samples: int = 0
    train_seconds: float = 0.0
    index: list[ckpt.IndexEntry] = field(default_factory=list)
    last_metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Window:
    """Per-step values summed over the current logging window (the grad norm is global: the same on every rank)."""

    loss: float = 0.0
    steps: int = 0
    clipped: int = 0
    seconds: float = 0.0
    grad_norm: float = 0.0
    grad_norm_max: float = 0.0
    lr: float = 0.0

    def add(self, loss: float, clipped: bool, seconds: float, *, grad_norm: float, lr: float) -> None:
        self.loss, self.steps, self.clipped, self.seconds = (
            self.loss + loss,
            self.steps + 1,
            self.clipped + int(clipped),
            self.seconds + seconds,
        )
        self.grad_norm += grad_norm
        self.grad_norm_max = max(self.grad_norm_max, grad_norm)
        self.lr = lr  # the last step's
