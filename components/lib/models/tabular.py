"""Models for tabular classification. They know nothing of ranks, devices or parallelism.

Every model takes ``(x_num, x_cat)`` — standardised numeric features ``[B, n_num]`` and categorical
vocabulary indices ``[B, n_cat]`` (0 = unseen) — and returns logits ``[B, classes]``. Repeated layers
live in ``self.blocks`` so that the parallelism module can shard them one by one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

from ctpipe.components.lib.config import ModelConfig


@dataclass
class InputSpec:
    """The shape of a model's input: how many numeric columns, each categorical column's cardinality."""

    n_numeric: int
    cardinalities: list[int]
    n_classes: int


class ResidualBlock(nn.Module):
    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, width * 2)
        self.fc2 = nn.Linear(width * 2, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.dropout(self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x)))))


class TabularMLP(nn.Module):
    """Embeddings for categorical columns, concatenated with numeric ones, then residual MLP blocks; with
    ``model.linear_path`` (wide and deep) the head also reads the numeric inputs themselves, so the model is a
    linear model plus the MLP: its numeric columns are ``head.weight[:, hidden:]`` (``init_linear_path``)."""

    def __init__(self, cfg: ModelConfig, spec: InputSpec) -> None:
        super().__init__()
        self.linear_inputs = spec.n_numeric if cfg.linear_path else 0
        self.embeddings = nn.ModuleList(nn.Embedding(card, cfg.embedding_dim) for card in spec.cardinalities)
        width_in = spec.n_numeric + cfg.embedding_dim * len(spec.cardinalities)
        self.stem = nn.Linear(max(width_in, 1), cfg.hidden)
        self.blocks = nn.ModuleList(ResidualBlock(cfg.hidden, cfg.dropout) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden + self.linear_inputs, spec.n_classes)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        parts = [x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(self.embeddings)]
        h = torch.cat(parts, dim=1) if parts else x_num
        if h.shape[1] == 0:
            h = torch.zeros(x_num.shape[0], 1, dtype=self.stem.weight.dtype, device=x_num.device)
        h = self.stem(h.to(self.stem.weight.dtype))
        for block in self.blocks:
            h = block(h)
        h = self.norm(h)
        if self.linear_inputs:
            h = torch.cat([h, x_num.to(h.dtype)], dim=1)
        return self.head(h)


class TransformerBlock(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, width * 2), nn.GELU(), nn.Linear(width * 2, width))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.dropout(self.attn(h, h, h, need_weights=False)[0])
        return x + self.dropout(self.mlp(self.norm2(x)))


class FeatureTokenTransformer(nn.Module):
    """FT-Transformer style: one token per feature plus a [CLS] token, attention over features only.

    Attention runs within one example (over its feature tokens), never across the batch.
    """

    def __init__(self, cfg: ModelConfig, spec: InputSpec) -> None:
        super().__init__()
        width = cfg.hidden
        self.numeric_weight = nn.Parameter(torch.randn(spec.n_numeric, width) * 0.02)
        self.numeric_bias = nn.Parameter(torch.zeros(spec.n_numeric, width))
        self.embeddings = nn.ModuleList(nn.Embedding(card, width) for card in spec.cardinalities)
        self.cls = nn.Parameter(torch.zeros(1, 1, width))
        self.blocks = nn.ModuleList(TransformerBlock(width, cfg.heads, cfg.dropout) for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, spec.n_classes)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor) -> torch.Tensor:
        dtype = self.numeric_weight.dtype
        tokens = [x_num.to(dtype).unsqueeze(-1) * self.numeric_weight + self.numeric_bias]
        tokens += [emb(x_cat[:, i]).unsqueeze(1) for i, emb in enumerate(self.embeddings)]
        h = torch.cat([self.cls.expand(x_num.shape[0], -1, -1)] + tokens, dim=1)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h[:, 0]))


def build_model(cfg: ModelConfig, spec: InputSpec) -> nn.Module:
    """The model named by ``cfg.kind``, initialised from the current torch RNG state."""
    if cfg.kind == "mlp":
        return TabularMLP(cfg, spec)
    if cfg.kind == "transformer":
        return FeatureTokenTransformer(cfg, spec)
    if cfg.kind is None:
        from ctpipe.components.lib.errors import ConfigError

        raise ConfigError("invalid model.kind=null for a tabular model: allowed 'mlp' or 'transformer' (null is for "
                          "a task that builds its own network, e.g. causal_lm); set --set model.kind=mlp")
    raise ValueError(f"unknown model kind {cfg.kind!r}")


@torch.no_grad()
def init_output_bias(model: nn.Module, class_prior: torch.Tensor) -> None:
    """Initialise the head's bias to log class priors, so loss at init is the label entropy (guides' advice)."""
    head = model.head
    head.weight.mul_(0.01)  # small logits at init, so the prior bias dominates
    head.bias.copy_(torch.log(class_prior.clamp_min(1e-6)).to(head.bias.dtype))


@torch.no_grad()
def init_linear_path(model: nn.Module, fit: dict | None) -> bool:
    """Start the linear path at a closed-form fit (``linear_fit.py``: ``{"weight": [outputs x numeric], "bias":
    [outputs]}``, in the model's output units); the MLP's part of the head stays as the task's init left it (small:
    ``init_output_bias``, not zero, so every weight gets a gradient at the first step), so the model starts as
    nearly that linear model. False (nothing changed) for a model without the path or a fit of another shape."""
    inputs = getattr(model, "linear_inputs", 0)
    if not inputs or not fit:
        return False
    weight = torch.tensor(fit["weight"], dtype=model.head.weight.dtype)
    bias = torch.tensor(fit["bias"], dtype=model.head.bias.dtype)
    head = model.head
    if weight.shape != (head.out_features, inputs) or bias.shape != (head.out_features,):
        return False
    head.weight[:, head.in_features - inputs :].copy_(weight)
    head.bias.copy_(bias)
    return True


def spec_to_dict(spec: InputSpec) -> dict:
    return asdict(spec)
