"""Batch independence: no example's output depends on another example's input (a sanity check).

Over every pair of rows of a small batch, in eval and in train mode, two ways: the gradient of each
output example with respect to every other example's floating-point input (one backward per example),
and the change of each example's output when only another example's input changes (which also covers
integer inputs such as token ids). A batch statistic, a BatchNorm forced into training mode, or indexing
the batch dimension where a feature dimension was meant shows up here before training.
"""

from __future__ import annotations

from typing import Any

from components.sanity.report import CheckResult

INDEPENDENCE_ROWS = 8
INDEPENDENCE_TOL = 1e-6


def _per_example_max(values, example_dim: int = 0):
    """Largest absolute value of each example's slice (examples along dimension 0)."""
    return values.abs().reshape(values.shape[0], -1).amax(dim=1) if values[0].numel() else values.new_zeros(len(values))


def _gradient_leak(model, inputs: tuple) -> tuple[float, tuple[int, int]]:
    """Largest abs(d out_i / d x_j) over examples j != i, and (i, j) where it is: one backward per output
    example, over every floating-point input (integer inputs are covered by the perturbation check)."""
    import torch

    n = len(inputs[0]) if inputs else 0
    differentiable = [k for k, x in enumerate(inputs) if x.is_floating_point() and x[0].numel() > 0]
    if not differentiable or n < 2:
        return 0.0, (0, 0)
    leaves = [x.clone().requires_grad_(True) if k in differentiable else x for k, x in enumerate(inputs)]
    torch.manual_seed(0)
    out = model(*leaves).float()
    if not out.requires_grad:
        return 0.0, (0, 0)
    targets = [leaves[k] for k in differentiable]
    worst, where = 0.0, (0, 0)
    for i in range(n):
        grads = torch.autograd.grad(out[i].sum(), targets, retain_graph=True, allow_unused=True)
        found = [_per_example_max(g) for g in grads if g is not None]
        if not found:
            continue
        grad = torch.stack(found).amax(dim=0)
        grad[i] = 0.0
        j = int(grad.argmax())
        if float(grad[j]) > worst:
            worst, where = float(grad[j]), (i, j)
    return worst, where


def _perturbed(inputs: tuple, j: int) -> tuple:
    """The inputs with example j changed alone: +1 on float inputs, the next example's values on the others."""
    out = []
    for x in inputs:
        changed = x.clone()
        if x.is_floating_point():
            changed[j] += 1.0
        else:
            changed[j] = x[(j + 1) % len(x)]
        out.append(changed)
    return tuple(out)


def _perturbation_leak(model, inputs: tuple) -> tuple[float, tuple[int, int]]:
    """Largest change of example i's output when only example j's input changes (j in turn, same dropout masks)."""
    import torch

    n = len(inputs[0]) if inputs else 0
    if n < 2:
        return 0.0, (0, 0)
    with torch.no_grad():
        torch.manual_seed(0)
        base = model(*inputs).float()
        worst, where = 0.0, (0, 0)
        for j in range(n):
            torch.manual_seed(0)
            change = _per_example_max(model(*_perturbed(inputs, j)).float() - base)
            change[j] = 0.0
            i = int(change.argmax())
            if float(change[i]) > worst:
                worst, where = float(change[i]), (i, j)
    return worst, where


def check_batch_independence(model: Any, examples: Any) -> list[CheckResult]:
    """No example's output depends on another example's input: all pairs of a small batch, in eval and in
    train mode.

    Train mode mixes examples legitimately only through batch normalisation: its BatchNorm layers are held
    in eval mode (running statistics) for the train-mode check, every other layer trains (dropout), so
    a row leak of the model's own is not excused by a BatchNorm elsewhere in it.
    """
    from torch import nn

    sample = examples.select(slice(0, INDEPENDENCE_ROWS))
    rows = len(sample)
    batch_norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    out = []
    for name, train_mode in (("batch_independence", False), ("batch_independence_train_mode", True)):
        model.train(train_mode)
        for norm in batch_norms:
            norm.eval()
        grad_leak, (gi, gj) = _gradient_leak(model, sample.inputs)
        change, (pi, pj) = _perturbation_leak(model, sample.inputs)
        leak = max(grad_leak, change)
        ok = leak <= INDEPENDENCE_TOL
        mode = "train" if train_mode else "eval"
        text = (f"in {mode} mode, over all {rows} rows: max abs(d out_i / d x_j) (j != i) = {grad_leak:.3g}"
                + (f" (row {gi} from row {gj})" if grad_leak > INDEPENDENCE_TOL else "")
                + f", max change of row i's output when only row j's input changes = {change:.3g}"
                + (f" (row {pi} when row {pj} changes)" if change > INDEPENDENCE_TOL else ""))
        if train_mode and batch_norms:
            text += " (BatchNorm layers in eval mode: they mix rows in train mode by design)"
        if not ok:
            text += ("; information flows between examples of a batch (a batch statistic such as a batch mean, a "
                     "BatchNorm forced into training mode, or indexing the batch dimension, e.g. x[0] where x[:, 0] "
                     "was meant): predictions would depend on batch composition")
        out.append(CheckResult(name, ok, leak, f"<= {INDEPENDENCE_TOL:g}", text))
    return out
