"""The unused-inputs check beside ``gradients_flow``: which parts of its input the model never reads.

``input_dependence`` asks that the output depend on *some* input, and the short training that the model beat an
input-blind one; a model that reads 8 of 64 pixels passes both (it does better than chance) and was promoted at
accuracy 0.43 where a healthy one gets 0.99. Here every unit of the input is asked whether it reaches the output:
a tabular column, or a block of an image's pixels (at most 8 x 8 blocks, all channels), is unused when the
gradient of the outputs (projected on a fixed random direction) with respect to each of its elements is zero for
every one of the sampled examples; an integer input (category indices) has no gradient, so each of its columns
is shuffled across the examples instead and is unused when no output moves (a column with one value in the
sample is not judged). A model initialised to ignore parts of its input (a zero-initialised head or adapter)
is asked again after ``WARM_UP_STEPS`` of the trainer's steps, as ``gradients_flow`` does.

An unused tabular column is an error (drop it from ``data.features`` if the model is meant not to read it), and
so is an image of which ``IMAGE_ERROR_SHARE`` or more of the blocks are unused (a wrong slice or reshape in
``forward``); fewer unused image blocks (a cropped border) are a warning. Only for a task with one example per
row (``DataCodec.rowwise``) and no sequence dimension: a sequence's padded positions are unused on purpose.
"""

from __future__ import annotations

import math
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.steps.sanity_checks.context import CheckContext
from ctpipe.components.steps.sanity_checks.short_training import StepTracker, run_steps
from ctpipe.components.tasks.protocol import CheckResult

ROWS = 256
WARM_UP_STEPS = 5
BLOCKS = 8
IMAGE_ERROR_SHARE = 0.25
RULE = "every tabular column and >= 75% of each image's pixel blocks reach the output"


def input_names(state: dict[str, Any], inputs: tuple) -> list[str]:
    """A name per input tensor: the tabular tasks' ``(x_num, x_cat, *images)`` by their columns, else by position."""
    names = [f"input {k}" for k in range(len(inputs))]
    images = list((state.get("images") or {}).keys())
    if len(inputs) >= 2 and isinstance(state.get("numeric"), dict) and isinstance(state.get("categorical"), dict):
        names[:2] = ["numeric column", "categorical column"]
        for k, column in enumerate(images[: len(inputs) - 2]):
            names[2 + k] = f"image '{column}'"
    return names


def unit_names(state: dict[str, Any], k: int, count: int) -> list[str]:
    """The names of the ``count`` columns of 2-D input ``k``: the state's numeric or categorical columns when they
    match, else their positions."""
    for key, at in (("numeric", 0), ("categorical", 1)):
        columns = list((state.get(key) or {}).keys()) if isinstance(state.get(key), dict) else []
        if k == at and len(columns) == count:
            return [f"'{c}'" for c in columns]
    return [f"column {j}" for j in range(count)]


def _blocks(used, height: int, width: int) -> tuple[list[str], int]:
    """(unused block names, blocks) of an image's per-pixel ``used`` [H, W] mask, in at most BLOCKS x BLOCKS blocks."""
    bh, bw = math.ceil(height / BLOCKS), math.ceil(width / BLOCKS)
    unused, total = [], 0
    for r in range(0, height, bh):
        for c in range(0, width, bw):
            total += 1
            if not bool(used[r : r + bh, c : c + bw].any()):
                unused.append(f"rows {r}-{min(r + bh, height) - 1} x cols {c}-{min(c + bw, width) - 1}"
                              if bh * bw > 1 else f"({r},{c})")
    return unused, total


def unused_units(model, inputs: tuple, state: dict[str, Any]) -> dict[str, tuple[list[str], int, bool]]:
    """Per input (by ``input_names``): (its unused units, how many units it has, whether it is an image)."""
    import torch

    model.eval()
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = model(*leaves).float()
    direction = torch.randn(out.shape[1:], generator=torch.Generator().manual_seed(0))
    floats = [x for x in leaves if x.requires_grad]
    grads = dict(zip((id(x) for x in floats),
                     torch.autograd.grad((out * direction).sum(), floats, allow_unused=True) if floats else [],
                     strict=True))
    found: dict[str, tuple[list[str], int, bool]] = {}
    for k, (x, name) in enumerate(zip(leaves, input_names(state, inputs), strict=True)):
        if x.dim() < 2 or x.shape[1] == 0 or len(x) < 2:
            continue
        if x.requires_grad:
            grad = grads[id(x)]
            used = torch.zeros(x.shape[1:], dtype=torch.bool) if grad is None else (grad != 0).any(dim=0)
            if x.dim() == 4:  # [B, C, H, W]: pixel blocks over all channels
                unused, total = _blocks(used.any(dim=0), x.shape[2], x.shape[3])
                found[name] = (unused, total, True)
                continue
            used = used.reshape(x.shape[1], -1).any(dim=1)
        else:
            used = torch.ones(x.shape[1], dtype=torch.bool)
            with torch.no_grad():
                for j in range(x.shape[1]):
                    if x[:, j].unique().numel() < 2:
                        continue
                    moved = x.clone()
                    moved[:, j] = x[torch.randperm(len(x), generator=torch.Generator().manual_seed(j)), j]
                    used[j] = bool((model(*[moved if i == k else v.detach() for i, v in enumerate(leaves)]).float()
                                    != out.detach()).any())
        columns = unit_names(state, k, x.shape[1])
        found[name] = ([columns[j] for j in range(x.shape[1]) if not bool(used[j])], x.shape[1], False)
    return found


def _verdict(found: dict[str, tuple[list[str], int, bool]]) -> tuple[bool, bool]:
    """(any unit unused, any unused enough for an error)."""
    some = any(unused for unused, _, _ in found.values())
    error = any(unused and (not image or len(unused) / total >= IMAGE_ERROR_SHARE)
                for unused, total, image in found.values())
    return some, error


def check_unused_inputs(ctx: CheckContext, cfg: Config) -> CheckResult:
    """Every input unit reaches the output of the model initialised as the trainer does (asked again after the
    warm-up steps when some do not at init)."""
    task = ctx.task
    if not task.codec.rowwise or task.checks.sanity.sequence_dim is not None:
        return CheckResult("unused_inputs", True, None, RULE,
                           "not judged: the task's examples are sequences (their padded positions are unused on purpose)")
    part = ctx.data.train.select(slice(0, ROWS))
    found = unused_units(ctx.trained_init(), part.inputs, ctx.data.state)
    when = "at init"
    if _verdict(found)[0]:
        model = ctx.trained_init()
        run_steps(model, ctx.loss_fn, part, cfg, steps=WARM_UP_STEPS, batch_size=len(part), seed=3,
                  tracker=StepTracker(), where="unused_inputs")
        found, when = unused_units(model, part.inputs, ctx.data.state), f"at init and after {WARM_UP_STEPS} training steps"
    some, error = _verdict(found)
    units = sum(total for _, total, _ in found.values())
    unused_count = sum(len(unused) for unused, _, _ in found.values())
    if not some:
        return CheckResult("unused_inputs", True, 0.0, RULE,
                           f"all {units} input units ({', '.join(found)}) reach the output over {len(part)} examples")
    listed = "; ".join(f"{name}: {len(unused)} of {total} {'pixel blocks' if image else 'columns'} "
                       f"({len(unused) / total:.0%}): {', '.join(unused[:8])}{', …' if len(unused) > 8 else ''}"
                       for name, (unused, total, image) in found.items() if unused)
    text = (f"the model never reads {unused_count} of its {units} input units ({when}: the gradient of its outputs "
            f"with respect to them, or its outputs when a category column is shuffled, is zero for every one of "
            f"{len(part)} examples): {listed}")
    if error:
        text += ("; the model reads a sliver of its input: a wrong slice, crop, mask or reshape in forward(), or an "
                 "input wired to nothing (drop a column from data.features if it is not meant to be read)")
    else:
        text += "; a few image blocks are never read (a cropped border?)"
    return CheckResult("unused_inputs", False, unused_count / max(units, 1), RULE, text,
                       severity="error" if error else "warning")
