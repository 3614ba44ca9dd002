"""Short trainings for the sanity checks: the trainer's own optimizer step on a sample, and eval-mode losses.

Samples are ``tasks.Batch`` values (``model(*inputs)``, targets) made by the run's task.

Every training in the checks goes through ``run_steps`` (``ctpipe.components.engine.step``: AdamW, the
warmup + cosine schedule, clipping, accumulation) on one process, so a bug in the step is gated too;
``StepTracker`` counts the steps whose loss or gradient was NaN/Inf for the ``finite`` check.

The trainings, and the scoring of what they trained, compute in the precision the trainer will use
(``trainer_precision``: bf16 under CPU autocast when the ranks will compute in bf16), so a model that
only trains in fp32 fails here rather than silently in the run; the structural checks stay exact in fp32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from ctpipe.components.lib.config import Config

LossFn = Callable[[Any, Any], Any]
Autocast = Callable[[], AbstractContextManager[Any]]
# How often (in steps) the overfit check asks whether the batch is memorised yet.
OVERFIT_CHECK_EVERY = 10


@dataclass(frozen=True)
class TrainerPrecision:
    """The dtype the trainer's ranks will compute in, and a context computing in it on this CPU process."""

    name: str  # "bf16" or "fp32"
    autocast: Autocast

    @property
    def words(self) -> str:
        """How a check's text says it, empty for fp32 (nothing to point out)."""
        return " in bf16" if self.name == "bf16" else ""


def trainer_precision(cfg: Config) -> TrainerPrecision:
    """bf16 under CPU autocast (matmuls in bf16, as the ranks' FSDP2 mixed precision or autocast computes
    them) when the trainer will compute in bf16 (``train.mixed_precision``, ``auto`` resolved for the ranks'
    device), else fp32."""
    import torch

    from ctpipe.components.engine.parallelize import planned_precision

    if planned_precision(cfg) != torch.bfloat16:
        return TrainerPrecision("fp32", nullcontext)
    return TrainerPrecision("bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16))


def eval_logits(model, inputs: tuple, autocast: Autocast = nullcontext):
    """The model's output in eval mode, without gradients (the model's mode is restored)."""
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast():
        logits = model(*inputs).float()
    model.train(was_training)
    return logits


def eval_loss(model, loss_fn: LossFn, batch) -> float:
    """The mean loss of a ``tasks.Batch`` in eval mode."""
    return float(loss_fn(eval_logits(model, batch.inputs), batch.targets))


def row_losses(model, task, batch, loss_fn: LossFn | None = None, autocast: Autocast = nullcontext):
    """Each example's loss in eval mode: the task's ``row_losses``, or any other loss example by example."""
    import torch

    logits = eval_logits(model, batch.inputs, autocast)
    y = batch.targets
    if loss_fn is None:
        return task.objective.row_losses(logits, y).double()
    with torch.no_grad():
        return torch.stack([loss_fn(logits[i : i + 1], y[i : i + 1]) for i in range(len(y))]).double()


def trainer_init(model, task, state, targets) -> Any:
    """The model initialised as the trainer does (the task's ``init_model``, e.g. bias at the log prior)."""
    task.model.init(model, state, targets)
    return model


class StepTracker:
    """Counts non-finite losses/gradients seen during any training in the checks."""

    def __init__(self) -> None:
        self.steps = 0
        self.non_finite = 0
        self.first_bad: str = ""

    def record(self, loss: float, grad_norm: float, where: str) -> bool:
        self.steps += 1
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return True
        self.non_finite += 1
        self.first_bad = self.first_bad or f"{where} step {self.steps}: loss {loss}, gradient norm {grad_norm}"
        return False


class BatchOrder:
    """Mini-batch indices in seeded epoch permutations (as a sampler without replacement draws them)."""

    def __init__(self, n: int, batch: int, seed: int) -> None:
        import torch

        self.n, self.batch = n, min(batch, n)
        self.gen = torch.Generator().manual_seed(seed)
        self.order, self.position = torch.randperm(n, generator=self.gen), 0

    def next(self):
        import torch

        if self.position + self.batch > self.n:
            self.order, self.position = torch.randperm(self.n, generator=self.gen), 0
        idx = self.order[self.position : self.position + self.batch]
        self.position += self.batch
        return idx


def run_steps(model, loss_fn: LossFn, batch, cfg: Config, *, steps: int, batch_size: int, seed: int,
               tracker: StepTracker, where: str, stop: Callable[[], bool] | None = None,
               autocast: Autocast = nullcontext) -> int:
    """``steps`` optimizer steps of the trainer's own step function (AdamW, schedule, clipping, accumulation)
    on the examples of ``batch`` (a ``tasks.Batch``), forward under ``autocast``.

    The schedule is the trainer's, with its warmup capped at half of ``steps`` so that a long warmup does
    not leave the short run at a tiny learning rate. Returns the steps taken.
    """
    import torch

    from ctpipe.components.engine.step import build_optimizer, optimizer_step

    t = cfg.train
    optimizer, scheduler = build_optimizer(model, t, warmup_steps=min(t.warmup_steps, steps // 2), max_steps=steps)
    order = BatchOrder(len(batch), batch_size, seed)
    torch.manual_seed(seed)  # dropout masks: the same in every training of the checks
    model.train()
    for step in range(steps):
        micro = []
        for _ in range(t.grad_accum_steps):
            part = batch.select(order.next())
            micro.append((part.inputs, part.targets))
        result = optimizer_step(model, micro, optimizer, scheduler, accum=t.grad_accum_steps,
                                grad_clip=t.grad_clip, loss_fn=loss_fn, autocast=autocast)
        if not tracker.record(result.loss, result.grad_norm, where):
            return step + 1
        if stop is not None and (step + 1) % OVERFIT_CHECK_EVERY == 0 and stop():
            return step + 1
    return steps
