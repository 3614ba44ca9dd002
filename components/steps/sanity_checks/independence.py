"""Batch independence: no example's output depends on another example's input (a sanity check).

Over every pair of rows of a small batch, in eval and in train mode, two ways: the gradient of each
output example with respect to every other example's floating-point input (one backward per example),
and the change of each example's output when only another example's input changes (which also covers
integer inputs such as token ids). Then over every row of a training-size batch (``train.batch_size``
rows, at most ``WIDE_ROWS_MAX``), where rows far apart may mix (a reshape across the batch, a roll): the
rows change in groups, one group per bit of the row index, so every pair is covered in 2·log2(n)
forwards; and in eval mode, whether a row's output changes with the batch size alone. A batch statistic,
a BatchNorm forced into training mode, or indexing the batch dimension where a feature dimension was
meant shows up here before training.
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.tasks.protocol import CheckResult

INDEPENDENCE_ROWS = 8
INDEPENDENCE_TOL = 1e-6
WIDE_ROWS_MAX = 256
# Another batch size may take other matrix kernels: the same rows agree to float rounding, not exactly.
BATCH_SIZE_RTOL = 1e-4


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


def _perturbed_rows(inputs: tuple, changed, seed: int) -> tuple:
    """The inputs with the rows ``changed`` (a mask) changed: seeded noise on float inputs (two changed rows do
    not cancel out), the next row's values on the others; the global RNG (dropout masks) is not touched."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    rows = torch.nonzero(changed).flatten()
    out = []
    for x in inputs:
        new = x.clone()
        if x.is_floating_point():
            new[rows] += torch.randn(new[rows].shape, generator=gen, dtype=torch.float32).to(x.dtype)
        else:
            new[rows] = x[(rows + 1) % len(x)]
        out.append(new)
    return tuple(out)


def _wide_leak(model, inputs: tuple) -> tuple[float, tuple[int, int, int]]:
    """Largest change of an unchanged row's output when other rows change, over every row of ``inputs``, and
    (row, index bit, side) where: for each bit of the row index the rows with that bit 0 (then 1) change."""
    import torch

    n = len(inputs[0]) if inputs else 0
    index = torch.arange(n)
    worst, where = 0.0, (0, 0, 0)
    if n < 2:
        return worst, where
    with torch.no_grad():
        torch.manual_seed(0)
        base = model(*inputs).float()
        for bit in range((n - 1).bit_length()):
            for side in (0, 1):
                changed = ((index >> bit) & 1) == side
                torch.manual_seed(0)
                change = _per_example_max(model(*_perturbed_rows(inputs, changed, 2 * bit + side)).float() - base)
                change[changed] = 0.0
                i = int(change.argmax())
                if float(change[i]) > worst:
                    worst, where = float(change[i]), (i, bit, side)
    return worst, where


def _batch_size_change(model, inputs: tuple) -> tuple[float, int]:
    """Largest change of the first half's outputs between the whole batch and the half alone, relative to the
    largest output (eval mode), and the half's size."""
    import torch

    half = len(inputs[0]) // 2 if inputs else 0
    if half < 1:
        return 0.0, half
    with torch.no_grad():
        whole = model(*inputs).float()[:half]
        alone = model(*(x[:half] for x in inputs)).float()
    return float((alone - whole).abs().max()) / max(1.0, float(whole.abs().max())), half


def check_batch_independence(model: Any, examples: Any, batch_rows: int = INDEPENDENCE_ROWS) -> list[CheckResult]:
    """No example's output depends on another example's input: all pairs of a small batch, in eval and in
    train mode.

    Train mode mixes examples legitimately only through batch normalisation: its BatchNorm layers are held
    in eval mode (running statistics) for the train-mode check, every other layer trains (dropout), so
    a row leak of the model's own is not excused by a BatchNorm elsewhere in it. ``batch_rows`` (the
    trainer's batch size) is the size of the wide batch.
    """
    from torch import nn

    sample = examples.select(slice(0, INDEPENDENCE_ROWS))
    rows = len(sample)
    wide = examples.select(slice(0, max(2, min(batch_rows, WIDE_ROWS_MAX))))
    batch_norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    out = []
    for name, train_mode in (("batch_independence", False), ("batch_independence_train_mode", True)):
        model.train(train_mode)
        for norm in batch_norms:
            norm.eval()
        grad_leak, (gi, gj) = _gradient_leak(model, sample.inputs)
        change, (pi, pj) = _perturbation_leak(model, sample.inputs)
        far, (fi, bit, side) = _wide_leak(model, wide.inputs)
        resized, half = (0.0, 0) if train_mode else _batch_size_change(model, wide.inputs)
        leak = max(grad_leak, change, far)
        ok = leak <= INDEPENDENCE_TOL and resized <= BATCH_SIZE_RTOL
        mode = "train" if train_mode else "eval"
        text = (f"in {mode} mode, over all {rows} rows: max abs(d out_i / d x_j) (j != i) = {grad_leak:.3g}"
                + (f" (row {gi} from row {gj})" if grad_leak > INDEPENDENCE_TOL else "")
                + f", max change of row i's output when only row j's input changes = {change:.3g}"
                + (f" (row {pi} when row {pj} changes)" if change > INDEPENDENCE_TOL else "")
                + f"; over the {len(wide)}-row training batch: max change of a row's output when only other rows "
                f"change = {far:.3g}"
                + (f" (row {fi} when the rows with index bit {bit} = {side} change)" if far > INDEPENDENCE_TOL else ""))
        if not train_mode:
            text += (f"; max change of the first {half} rows' outputs in a batch of {half} rows instead of "
                     f"{len(wide)}, relative = {resized:.3g} (<= {BATCH_SIZE_RTOL:g})")
        if train_mode and batch_norms:
            text += " (BatchNorm layers in eval mode: they mix rows in train mode by design)"
        if leak > INDEPENDENCE_TOL:
            text += ("; information flows between examples of a batch (a batch statistic such as a batch mean, a "
                     "BatchNorm forced into training mode, or indexing the batch dimension, e.g. x[0] where x[:, 0] "
                     "was meant): predictions would depend on batch composition")
        elif not ok:
            # No row moves another: the evidence that failed is the batch size alone. Lead with it.
            text = (f"batch size changes the outputs: the first {half} rows' outputs move by {resized:.3g} (relative, "
                    f"<= {BATCH_SIZE_RTOL:g}) when run as a batch of {half} rows instead of {len(wide)}, while no row's "
                    "input moves another's output: randomness active at evaluation (dropout left on, a random "
                    "augmentation) or a statistic over the batch size (a sum meant as a mean); " + text)
            leak = resized
        out.append(CheckResult(name, ok, leak, f"<= {INDEPENDENCE_TOL:g}", text))
    return out
