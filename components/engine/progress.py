"""A training run's counters: what survives a resume (``Progress``) and the current logging window.

``Progress`` is saved in every checkpoint's meta and restored by a resume; ``Window`` sums per-step
values between two all-reduced log lines; ``Unsettled`` holds the steps since the last boundary, whose loss
and gradient norm are still on the device (read in one host sync at the boundary, never once a step).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ctpipe.components.engine.checkpoint_index import IndexEntry
from ctpipe.components.lib.work_progress import clock_seconds, clock_text


@dataclass
class Progress:
    """Counters that survive a resume (saved in every checkpoint's meta)."""

    step: int = 0
    clipped_steps: int = 0
    samples: int = 0
    train_seconds: float = 0.0
    index: list[IndexEntry] = field(default_factory=list)
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


@dataclass
class Unsettled:
    """The steps since the last boundary (log window, evaluation, checkpoint): (lr, loss, grad norm), the last two
    0-dim tensors still on the device."""

    steps: list[tuple[float, Any, Any]] = field(default_factory=list)

    def add(self, lr: float, loss: Any, grad_norm: Any) -> None:
        self.steps.append((lr, loss, grad_norm))

    def settle(self, progress: Progress, window: Window, *, grad_clip: float, seconds: float) -> tuple[int, float, float] | None:
        """Read every step's loss and norm in one host sync and add the steps (and their ``seconds``) to the progress
        and the window, up to the first non-finite one: that one's (step, loss, grad norm), else None."""
        import torch

        steps, self.steps = self.steps, []
        if not steps:
            return None
        values = torch.stack([value.float() for step in steps for value in step[1:]]).tolist()  # loss, norm, ...
        first = progress.step - len(steps) + 1
        for offset, (lr, loss, grad_norm) in enumerate(zip((s[0] for s in steps), values[::2], values[1::2],
                                                           strict=True)):
            if not (math.isfinite(loss) and math.isfinite(grad_norm)):
                return first + offset, loss, grad_norm
            clipped = grad_norm > grad_clip
            progress.clipped_steps += int(clipped)
            window.add(loss, clipped, seconds / len(steps), grad_norm=grad_norm, lr=lr)
        progress.train_seconds += seconds
        return None


# The line rank 0 prints once per logging window: what `ctpipe run` shows as its training progress line and
# what a cluster's step log streams. One format, written and parsed here.
_PROGRESS = re.compile(
    r"progress step (?P<step>\d+)/(?P<total>\d+) loss (?P<loss>\S+) "
    r"(?P<rate>[\d.]+) samples/s ETA (?P<eta>\d+:\d\d:\d\d)"
)


@dataclass(frozen=True)
class ProgressLine:
    """Where training stands: step of total, the window's mean train loss, throughput and time left."""

    step: int
    total: int
    loss: float
    samples_per_second: float
    eta_seconds: float

    def text(self) -> str:
        """The line without the ``[train]`` that ``log_rank0`` puts before it."""
        return (f"progress step {self.step}/{self.total} loss {self.loss:.4f} "
                f"{self.samples_per_second:.1f} samples/s ETA {clock_text(self.eta_seconds)}")

    @classmethod
    def parse(cls, line: str) -> ProgressLine | None:
        """The progress a log line reports, or None for any other line."""
        match = _PROGRESS.search(line)
        if match is None:
            return None
        return cls(int(match["step"]), int(match["total"]), float(match["loss"]), float(match["rate"]),
                   clock_seconds(match["eta"]))
