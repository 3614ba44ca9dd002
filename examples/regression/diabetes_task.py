"""A user's regression task on the minimal API: scikit-learn's diabetes data, a small residual network.

    python examples/regression/write_partitions.py /tmp/diabetes
    PYTHONPATH=examples/regression ctpipe run --data /tmp/diabetes --set data.label=target --set data.key=null \
        --set task.entrypoint=diabetes_task:make_task --set task.options.width=32

The regression family brings the rest: the label validated as a number, MSE on the standardised label,
RMSE/MAE/R² against the mean predictor, a pyfunc returning ``prediction``. Here only the model is ours, and
a Huber loss (robust to the few extreme scores) where the family's MSE does not fit.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ctpipe.task import Inputs, tabular_task


class Block(nn.Module):
    """A residual MLP block; ``blocks`` are the units FSDP2 shards one by one."""

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.norm, self.fc, self.dropout = nn.LayerNorm(width), nn.Linear(width, width), nn.Dropout(dropout)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.dropout(F.gelu(self.fc(self.norm(h))))


class DiabetesNet(nn.Module):
    """x_num [B, 10] (the standardised measurements; the data has no categorical column) -> [B, 1]."""

    def __init__(self, inputs: Inputs, width: int, depth: int, dropout: float) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, 4) for n in inputs.categorical)
        self.stem = nn.Linear(inputs.numeric + 4 * len(inputs.categorical), width)
        self.blocks = nn.ModuleList(Block(width, dropout) for _ in range(depth))
        self.head = nn.Linear(width, inputs.outputs)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        parts = [x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        h = self.stem(torch.cat(parts, dim=1))
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def make_task(width: int = 32, depth: int = 1, dropout: float = 0.2):
    """The factory ``task.entrypoint=diabetes_task:make_task`` names; ``task.options`` are its arguments."""
    return tabular_task("diabetes", family="regression", loss="huber",
                        model=lambda inputs: DiabetesNet(inputs, width, depth, dropout))
