"""The hook points of a training rank: no-ops that ``CTPIPE_HOOKS`` may replace (``components/lib/hooks.py``).

``Trainer`` takes its hooks once (``training_hooks()``) and calls them at each optimizer step, around each
checkpoint's completion marker and when training has ended; ctpipe's tests make a rank fail there
(``ctpipe.testing.faults``). Unset, each call returns at once and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from ctpipe.components.lib.hooks import load_hooks


class TrainingHooks:
    """What a rank calls at each point of its run; subclass it to act there."""

    def before_step(self, step: int, rank: int) -> None:
        """Before optimizer step ``step`` (0-based) on ``rank``."""

    def loss_fn(self, step: int, rank: int, loss_fn: Callable) -> Callable:
        """The loss function step ``step`` uses on ``rank`` (by default the task's own)."""
        return loss_fn

    def before_marker(self, step: int, rank: int) -> Callable[[], None] | None:
        """What the save of ``step`` calls between its shards and its completion marker, if anything."""
        return None

    def after_marker(self, step: int, rank: int) -> None:
        """Once the save of ``step`` is marked complete, before its retention and index."""

    def after_training(self, step: int, rank: int, tracker: object) -> None:
        """Rank 0, once the result of a run ended at ``step`` is written, before the tracker's last calls."""


def training_hooks() -> TrainingHooks:
    """The loaded hooks when they serve training, else the no-ops."""
    return load_hooks(TrainingHooks)
