"""A user's task on the minimal API: 8x8 digit images (Parquet bytes) classified by a small CNN.

    PYTHONPATH=examples/digits ctpipe run --data /tmp/digits --set data.key=id --set task.entrypoint=digits_task:make_task

The model is ours; the classification family brings the rest, ``Image`` the pixel column's decoding and checks.
"""

import torch
import torch.nn.functional as F
from torch import nn

from ctpipe.task import Image, Inputs, tabular_task


def conv_block(width: int) -> nn.Module:
    """A 3x3 convolution after a per-example norm (GroupNorm never mixes examples)."""
    return nn.Sequential(nn.GroupNorm(1, width), nn.GELU(), nn.Conv2d(width, width, 3, padding=1))


class DigitsCNN(nn.Module):
    """image [B, 1, 8, 8] -> logits [B, classes]; ``blocks`` are the units FSDP shards one by one."""

    def __init__(self, inputs: Inputs, width: int, depth: int) -> None:
        super().__init__()
        self.stem = nn.Conv2d(inputs.images[0][0], width, 3, padding=1)
        self.blocks = nn.Sequential(*(conv_block(width) for _ in range(depth)))
        self.head = nn.Linear(width * 4, inputs.outputs)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        # The data has no numeric or categorical feature: x_num and x_cat are [B, 0].
        return self.head(F.adaptive_avg_pool2d(F.gelu(self.blocks(self.stem(image))), 2).flatten(1))


def make_task(width: int = 16, depth: int = 2):
    """The factory ``task.entrypoint=digits_task:make_task`` names; ``task.options`` are its arguments."""
    if width < 1 or depth < 1:
        raise ValueError(f"task.options width and depth must be >= 1 (got width={width}, depth={depth})")
    return tabular_task("digits", images=[Image("image", (8, 8), max_value=16)],
                        model=lambda inputs: DigitsCNN(inputs, width, depth))
