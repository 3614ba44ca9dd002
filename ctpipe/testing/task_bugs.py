"""Issue 48's bugs in a user's task or model: what the gates must stop in regression, images and a user's classifier.

Each is named by a task entrypoint (``task.entrypoint=ctpipe.testing.task_bugs:FACTORY``) or handed to the sanity
gate as a model factory; the tests (tests/components/steps/sanity_checks/test_unused_and_oracle.py) and
``benchmarks/gate_cases/blind_spots_families.py`` share them. Nothing in a run imports this module.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn


def regression_without_inverse(**options: Any):
    """The built-in regression whose ``predict`` forgets to map the model's standardised outputs back to the
    label's units (``z * std + mean``): every prediction is in training units."""
    from ctpipe.components.tasks.regression import TabularRegression

    family = TabularRegression(**options)
    spec = family.spec()

    def predict(model, frame, state, reference) -> np.ndarray:
        out = [z.reshape(-1).astype(np.float64) for z in family.model_outputs(model, frame, state)]
        return np.concatenate(out) if out else np.zeros(0)

    return replace(spec, name="regression_without_inverse", scoring=replace(spec.scoring, predict=predict))


def regression_with_wrong_inverse(**options: Any):
    """The built-in regression whose ``predict`` undoes the standardisation the wrong way round (``(z - mean) / std``)."""
    from ctpipe.components.tasks.regression import TabularRegression

    family = TabularRegression(**options)
    spec = family.spec()

    def predict(model, frame, state, reference) -> np.ndarray:
        z = np.concatenate([o.reshape(-1).astype(np.float64) for o in family.model_outputs(model, frame, state)])
        return (z - state["target"]["mean"]) / state["target"]["std"]

    return replace(spec, name="regression_with_wrong_inverse", scoring=replace(spec.scoring, predict=predict))


class ReadsASliver(nn.Module):
    """A CNN over ``[B, C, H, W]`` images that (by a slicing bug) keeps only the top-left ``keep`` x ``keep`` corner
    of each image: 8 of 64 pixels of an 8 x 8 digit with ``keep`` = 2 rows x 4 columns."""

    def __init__(self, channels: int, outputs: int, rows: int = 2, cols: int = 4, width: int = 16) -> None:
        super().__init__()
        self.rows, self.cols = rows, cols
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.blocks = nn.Sequential(nn.GroupNorm(1, width), nn.GELU(), nn.Conv2d(width, width, 3, padding=1))
        self.head = nn.Linear(width, outputs)

    def forward(self, x_num, x_cat, image):
        h = self.blocks(self.stem(image[:, :, : self.rows, : self.cols]))
        return self.head(torch.nn.functional.gelu(h).mean(dim=(2, 3)))


class SmallCNN(nn.Module):
    """The healthy counterpart of ``ReadsASliver``: the same network over the whole image."""

    def __init__(self, channels: int, outputs: int, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.blocks = nn.Sequential(nn.GroupNorm(1, width), nn.GELU(), nn.Conv2d(width, width, 3, padding=1))
        self.head = nn.Linear(width * 4, outputs)

    def forward(self, x_num, x_cat, image):
        h = torch.nn.functional.gelu(self.blocks(self.stem(image)))
        return self.head(torch.nn.functional.adaptive_avg_pool2d(h, 2).flatten(1))


def digit_images(sliver: bool = False):
    """A user's classifier of 8 x 8 digit images (``image`` column, pixels 0..16): ``SmallCNN``, or with
    ``sliver`` the network that reads 8 of the 64 pixels."""
    from ctpipe.task import Image, tabular_task

    def model(inputs):
        channels = inputs.images[0][0]
        return ReadsASliver(channels, inputs.outputs) if sliver else SmallCNN(channels, inputs.outputs)

    return tabular_task("digits_sliver" if sliver else "digits_cnn", images=[Image("image", (8, 8), max_value=16)],
                        model=model)


def frequency_weighted_loss(class_shares: torch.Tensor):
    """Cross-entropy with class weights proportional to each class's frequency (meant: to its inverse), which
    trades the rare classes away: a legal loss with the wrong trade-off (per-example losses, ``tabular_task``'s
    ``loss``)."""

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        weights = (class_shares / class_shares.mean()).to(outputs.dtype)
        return nn.functional.cross_entropy(outputs, targets, weight=weights, reduction="none")

    return loss
