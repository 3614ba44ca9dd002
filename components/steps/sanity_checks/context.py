"""What every sanity check is handed: fresh models, the sample, the task, the training loss and the per-row loss."""

from __future__ import annotations

from ctpipe.components.steps.sanity_checks.sample import SanityData
from ctpipe.components.steps.sanity_checks.short_training import TrainerPrecision, row_losses, trainer_init


class CheckContext:
    """What every check needs: fresh models, the sample, the task, the training loss and the per-row loss."""

    def __init__(self, factory, data: SanityData, task, loss_fn, custom_loss, precision: TrainerPrecision) -> None:
        self.factory, self.data, self.task, self.loss_fn, self.custom_loss = factory, data, task, loss_fn, custom_loss
        self.precision = precision  # what the training checks train and score in: the trainer's
        # Set when a parameter gets no gradient, or the output does not vary, at init (zero-initialised layers):
        # the independence checks then look at the model after that many steps, when every layer shows.
        self.warm_up_steps = 0

    def trained_init(self):
        """A fresh model initialised as the trainer does it, on the train sample's targets."""
        return trainer_init(self.factory(), self.task, self.data.state, self.data.train.targets)

    def row_losses(self, model, batch):
        return row_losses(model, self.task, batch, self.custom_loss, self.precision.autocast)
