"""A strong baseline beside the trivial one: a linear model on the candidate's own encoded features, fitted on train.

The trivial baseline (the prior or mean predictor) tells a model that learned something from one that learned
nothing; it cannot tell a model that learned a tenth of what the obvious baseline learns (a regression at RMSE
63.1 against the mean's 63.5, where ridge regression reaches 58.6), nor one that reads a sliver of its input or
trades its rare classes away. So evaluation also scores the linear model a practitioner fits first: multinomial
logistic regression for class targets, ridge regression for a real-valued target, with an L2 penalty chosen on the
val split (log loss, or squared error), on the features the candidate's codec makes (``codec.encode``: numeric
columns as encoded, category indices one-hot, image pixels average-pooled to at most ``POOL`` x ``POOL`` a
channel), each standardised on train. It is fitted in closed form (ridge: one eigendecomposition for every
penalty) or by L-BFGS (logistic), in float64 with torch: no other library.

The fitted model is a stand-in ``nn.Module`` called like the candidate (``model(*inputs)``), whose outputs are
what the candidate's would be (class logits, or the target in its encoded units), so the task's own ``predict``
turns it into predictions evaluation scores like any other model. Only for one class or one number per row
(``DataCodec.rowwise``, targets of one dimension); ``None`` with the reason otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

# Rows of train (and of val) the baseline is fitted on at most, and features at most (after one-hot and pooling).
MAX_ROWS = 50_000
MAX_FEATURES = 4096
# Images are average-pooled to at most this many pixels a side, a channel.
POOL = 16
# A category column with more values than this is left out (its one-hot would dwarf the rest).
MAX_CATEGORIES = 256
# L2 penalties tried (per row, on standardised features), the one with the best val loss kept.
PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)
LBFGS_STEPS = 200


@dataclass
class LinearBaseline:
    """The fitted linear model as a stand-in for the candidate, its name and how it was fitted."""

    name: str
    model: Any  # an nn.Module called as model(*inputs)
    detail: str


def _take(frames: Iterable[pd.DataFrame], rows: int) -> pd.DataFrame | None:
    """The first ``rows`` rows of a stream of record batches (None when there are none)."""
    kept, count = [], 0
    for frame in frames:
        kept.append(frame.iloc[: rows - count])
        count += len(kept[-1])
        if count >= rows:
            break
    return pd.concat(kept, ignore_index=True) if kept and count else None


class Features:
    """Encoded inputs -> one float64 matrix: float inputs flattened (images pooled), integer ones one-hot."""

    def __init__(self, inputs: tuple) -> None:
        import torch

        self.sizes = [int(x.max()) + 1 if not x.is_floating_point() and x.numel() else 0 for x in inputs]
        self.kept = [x.dim() >= 2 and (x.is_floating_point() or 0 < self.sizes[k] <= MAX_CATEGORIES)
                     for k, x in enumerate(inputs)]
        raw = self._raw(inputs)
        self.mean = raw.mean(dim=0)
        self.std = raw.std(dim=0).clamp_min(1e-8) if len(raw) > 1 else torch.ones(raw.shape[1], dtype=torch.float64)
        self.width = raw.shape[1]

    def _raw(self, inputs: tuple):
        import torch
        import torch.nn.functional as F

        parts = []
        for x, size, kept in zip(inputs, self.sizes, self.kept, strict=True):
            if not kept or x.shape[1] == 0:
                continue
            if x.is_floating_point():
                if x.dim() == 4 and max(x.shape[2:]) > POOL:
                    x = F.adaptive_avg_pool2d(x.float(), (min(x.shape[2], POOL), min(x.shape[3], POOL)))
                parts.append(x.reshape(len(x), -1).double())
            else:
                # An index train never held (an unseen category) is the extra slot, dropped: no category at all.
                hot = F.one_hot(x.long().clamp(0, size), size + 1)[..., :size]
                parts.append(hot.reshape(len(x), -1).double())
        return torch.cat(parts, dim=1) if parts else torch.zeros(len(inputs[0]), 0, dtype=torch.float64)

    def __call__(self, inputs: tuple):
        return (self._raw(inputs) - self.mean) / self.std


def _stand_in(features: Features, weight, bias, shape: tuple[int, ...]):
    """An ``nn.Module`` computing the linear model's outputs in the candidate's output ``shape`` (after the rows)."""
    import torch
    from torch import nn

    class LinearStandIn(nn.Module):
        def forward(self, *inputs):
            with torch.no_grad():
                out = features(inputs) @ weight + bias
            return out.float().reshape(len(out), *shape)

    return LinearStandIn()


def _ridge(x, y, x_val, y_val):
    """Ridge regression (intercept unpenalised) with the penalty of ``PENALTIES`` that predicts val best."""
    import torch

    n = len(x)
    mean_x, mean_y = x.mean(dim=0), y.mean()
    xc, yc = x - mean_x, y - mean_y
    values, vectors = torch.linalg.eigh(xc.T @ xc)
    projected = vectors.T @ (xc.T @ yc)
    best = None
    for penalty in PENALTIES:
        w = vectors @ (projected / (values.clamp_min(0) + penalty * n))
        b = mean_y - mean_x @ w
        loss = float(((x_val @ w + b - y_val) ** 2).mean())
        if best is None or loss < best[0]:
            best = (loss, penalty, w, b)
    return best


def _logistic(x, y, classes: int, x_val, y_val):
    """Multinomial logistic regression by L-BFGS, with the penalty of ``PENALTIES`` of the best val log loss."""
    import torch
    import torch.nn.functional as F

    w = torch.zeros(x.shape[1], classes, dtype=torch.float64, requires_grad=True)
    prior = torch.bincount(y, minlength=classes).double().clamp_min(0.5)
    b = (prior / prior.sum()).log().clone().requires_grad_(True)
    best = None
    for penalty in sorted(PENALTIES, reverse=True):  # strong to weak, each started from the last
        optimiser = torch.optim.LBFGS([w, b], lr=1.0, max_iter=LBFGS_STEPS, line_search_fn="strong_wolfe")

        def closure(penalty=penalty, optimiser=optimiser):
            optimiser.zero_grad()
            loss = F.cross_entropy(x @ w + b, y) + 0.5 * penalty * (w**2).sum()
            loss.backward()
            return loss

        optimiser.step(closure)
        with torch.no_grad():
            loss = float(F.cross_entropy(x_val @ w + b, y_val))
        if best is None or loss < best[0]:
            best = (loss, penalty, w.detach().clone(), b.detach().clone())
    return best


def fit_linear_baseline(task: Any, state: dict[str, Any], train: Iterable[pd.DataFrame], val: Iterable[pd.DataFrame],
                        output_shape: tuple[int, ...]) -> tuple[LinearBaseline | None, str]:
    """(the linear baseline fitted on ``train`` with its penalty chosen on ``val``, or None; what was done or why not).

    ``output_shape``: the candidate's output for one batch ([rows, classes] or [rows, 1])."""
    import torch

    if not task.codec.rowwise:
        return None, "no linear baseline: the task's examples are not one per row"
    train_rows = _take(train, MAX_ROWS)
    if train_rows is None:
        return None, "no linear baseline: the train split is empty"
    batch = task.codec.encode(train_rows, state)
    targets = batch.targets
    classes = not targets.is_floating_point()
    if targets.dim() != 1 or (classes and len(output_shape) != 2) or (not classes and int(np.prod(output_shape[1:])) != 1):
        return None, (f"no linear baseline: targets of shape {list(targets.shape)} for outputs {list(output_shape)} are "
                      "not one class or one number per row")
    features = Features(batch.inputs)
    if not 0 < features.width <= MAX_FEATURES:
        return None, f"no linear baseline: {features.width} features (at most {MAX_FEATURES})"
    x = features(batch.inputs)
    val_rows = _take(val, MAX_ROWS)
    val_batch = task.codec.encode(val_rows, state) if val_rows is not None else batch
    x_val = features(val_batch.inputs)
    if classes:
        loss, penalty, weight, bias = _logistic(x, targets.long(), output_shape[1], x_val, val_batch.targets.long())
        name = "logistic regression"
    else:
        loss, penalty, weight, bias = _ridge(x, targets.double(), x_val, val_batch.targets.double())
        weight, bias = weight[:, None], bias.reshape(1)
        name = "ridge regression"
    with torch.no_grad():
        model = _stand_in(features, weight, bias, tuple(output_shape[1:]))
    where = f"{len(val_batch.targets)} val rows" if val_rows is not None else "the train rows (no val rows)"
    return LinearBaseline(name, model, f"{name} on the candidate's {features.width} encoded features, fitted on "
                                       f"{len(targets)} train rows, L2 penalty {penalty:g} chosen on {where} "
                                       f"(val {'log loss' if classes else 'MSE'} {loss:.4g})"), ""
