"""Known model and trainer bugs as small modules and functions: the corpus the sanity gate is held to.

Each bug here is one the gate must stop, with the check that stops it named in the tests
(tests/components/steps/sanity_checks/test_checks.py) and measured over seeds by ``benchmarks/gate_cases/sanity.py``.
They live in the package so the tests and the benchmark share one copy; nothing in a run imports them.
A wrapper keeps the wrapped model's ``head`` (the checks read its bias for the label prior).
"""

from __future__ import annotations

import torch
from torch import nn


class _Wrapper(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head


class AddsFirstRow(_Wrapper):
    """The x[0]-for-x[:, 0] bug: every row's input gets the batch's first row added."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num + x_num[:1], x_cat)


class MixesRowsInTrainMode(_Wrapper):
    """Mixes rows only while training (a batch statistic without BatchNorm): eval mode looks clean."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num - x_num.mean(dim=0, keepdim=True) if self.training else x_num, x_cat)


class BatchMean(_Wrapper):
    """Subtracts the batch mean of the inputs: predictions depend on the rest of the batch."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num - x_num.mean(dim=0, keepdim=True), x_cat)


class LeaksBeyondEightRows(_Wrapper):
    """Each row gets half of the row 8 places before it (``torch.roll``): invisible in a batch of 8 or fewer."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num + 0.5 * torch.roll(x_num, 8, dims=0) if len(x_num) > 8 else x_num, x_cat)


class ScaledByBatchSize(_Wrapper):
    """Scales its inputs by the batch size (a sum meant as a mean): a row's output depends on how many rows
    came with it, not on what they hold."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num * len(x_num) / 64, x_cat)


class BatchNormAndFirstRowInTrainMode(_Wrapper):
    """A legitimate BatchNorm, and beside it the x[:1] leak while training: the BatchNorm must not excuse it."""

    def __init__(self, inner: nn.Module, n_numeric: int) -> None:
        super().__init__(inner)
        self.norm = nn.BatchNorm1d(n_numeric)

    def forward(self, x_num, x_cat):
        x_num = self.norm(x_num)
        return self.inner(x_num + 0.5 * x_num[:1] if self.training else x_num, x_cat)


class ForcedTrainBatchNorm(_Wrapper):
    """BatchNorm that always uses batch statistics, even in eval mode."""

    def __init__(self, inner: nn.Module, n_numeric: int) -> None:
        super().__init__(inner)
        self.norm = nn.BatchNorm1d(n_numeric)

    def forward(self, x_num, x_cat):
        normed = nn.functional.batch_norm(x_num, None, None, self.norm.weight, self.norm.bias, training=True)
        return self.inner(normed, x_cat)


class DetachedBody(_Wrapper):
    """The body's output is detached: only the head ever gets a gradient (the tabular MLP's layout)."""

    def forward(self, x_num, x_cat):
        inner = self.inner
        parts = [x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(inner.embeddings)]
        h = inner.stem(torch.cat(parts, dim=1))
        for block in inner.blocks:
            h = block(h)
        h = inner.norm(h).detach()
        # the linear path (model.linear_path) reads the inputs themselves: unchanged, it is not the body
        return self.head(torch.cat([h, x_num], dim=1) if getattr(inner, "linear_inputs", 0) else h)


class ReturnsProbabilities(_Wrapper):
    """Softmax inside the model, so cross-entropy applies a second softmax to probabilities."""

    def forward(self, x_num, x_cat):
        return self.inner(x_num, x_cat).softmax(dim=-1)


class DropoutAtEvaluation(_Wrapper):
    """Dropout on the inputs that ignores eval mode (``F.dropout(x, training=True)``): evaluations are random."""

    def forward(self, x_num, x_cat):
        return self.inner(nn.functional.dropout(x_num, p=0.5, training=True), x_cat)


class IgnoresInput(nn.Module):
    """Learns only a bias: its output is the same for every example."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.head = nn.Linear(1, n_classes)

    def forward(self, x_num, x_cat):
        return self.head(torch.ones(x_num.shape[0], 1))


def only_the_bias_trains(model: nn.Module) -> nn.Module:
    """Every parameter frozen but the head's bias (a fine-tuning setup gone wrong)."""
    for p in model.parameters():
        p.requires_grad_(False)
    model.head.bias.requires_grad_(True)
    return model


def clipped_loss(logits, y):
    """The loss is clamped (meant as gradient clipping), which zeroes its gradient."""
    return nn.functional.cross_entropy(logits, y).clamp(max=0.5)


def nan_loss(logits, y):
    """A loss that is NaN from the first step."""
    return nn.functional.cross_entropy(logits, y) * torch.tensor(float("nan"))


def zeroing_clip(parameters, max_norm):
    """'Clipping' that scales every gradient to zero (returns the true norm, so nothing looks odd)."""
    from ctpipe.components.engine.parallelize import clip_grad_norm_

    params = list(parameters)
    norm = clip_grad_norm_(params, max_norm)
    for p in params:
        if p.grad is not None:
            p.grad.zero_()
    return norm


class LosesInputsInBf16(_Wrapper):
    """Its first layer takes its input with a large offset (1024, as a raw year or day number would come)
    and takes the offset's share back out after the matmul: exact in fp32, but in bf16 the matmul rounds
    the inputs to steps of 8, so a model that trains in bf16 never sees them."""

    OFFSET = 1024.0

    def forward(self, x_num, x_cat):
        inner = self.inner
        h = torch.cat([x_num] + [emb(x_cat[:, i]) for i, emb in enumerate(inner.embeddings)], dim=1)
        offset = torch.full_like(h[:1], self.OFFSET)
        h = inner.stem(h + offset) - nn.functional.linear(offset, inner.stem.weight)
        for block in inner.blocks:
            h = block(h)
        h = inner.norm(h)
        if not getattr(inner, "linear_inputs", 0):
            return self.head(h)
        # The linear path (model.linear_path) takes the inputs with the same offset, taken back out after the matmul.
        shift = torch.cat([torch.zeros_like(h[:1]), torch.full_like(x_num[:1], self.OFFSET)], dim=1)
        return self.head(torch.cat([h, x_num], dim=1) + shift) - nn.functional.linear(shift, self.head.weight)
