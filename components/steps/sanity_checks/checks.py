"""Sanity checks: cheap tests of the configured model on a sample of the real data, before training.

They follow the seed guides' "trustworthy skeleton" advice and fail the run on a hard failure:

* the task's ``init_losses`` (``Task.init_losses``), e.g. for classification ``init_loss_uniform``: with
  the output layer initialised to a uniform prior the loss at init is ln C = -log(1/C) for C classes
  (torch's default init is reported as ``init_loss_default``); ``init_loss_prior``: with the head bias
  set to the log class prior (which the trainer uses), the loss at init is the label entropy H(prior);
* ``input_dependence``: the output changes with the input;
* ``gradients_flow``: every trainable parameter gets a non-zero, finite gradient at init;
* ``unused_inputs`` (``unused_inputs.py``): every tabular column and image pixel block reaches the output;
* ``batch_independence`` (eval mode) and ``batch_independence_train_mode``: no row's output depends on
  another row's input, for every pair of rows of a small batch (gradients and perturbations);
* ``overfit_one_batch``: a tiny batch of at least two classes is memorised (100% accuracy, near-zero loss);
* ``loss_decreases``: the short training lowers the per-row loss of the sample beyond its noise;
* ``beats_zero_input_baseline``: after the same short training the model beats, on held-out rows and
  beyond the noise of the per-row loss difference, the same model fed zeroed inputs;
* ``finite``: no NaN/Inf in any loss or gradient; ``first_batch_roundtrip``: the first batch's tensors
  decode back to the raw values (and are saved as an artifact).

Every training here is the trainer's own optimizer step (``short_training.run_steps``: AdamW, the
warmup + cosine schedule, clipping, accumulation) on one process, so a bug there is gated too. The
training checks (overfit, short training, finite) train and score in the precision the trainer will
compute in (``short_training.trainer_precision``); the structural ones stay exact in fp32.
``check_model`` runs them all; ``gate.run_sanity_checks`` is the step around it (sample, dump, report).
Models are called ``model(*inputs)`` on the task's examples; examples are indexed along dimension 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.steps.sanity_checks.context import CheckContext
from ctpipe.components.steps.sanity_checks.independence import check_batch_independence
from ctpipe.components.steps.sanity_checks.loss_probes import check_loss_oracle, check_loss_padding
from ctpipe.components.steps.sanity_checks.report import SanityResult
from ctpipe.components.steps.sanity_checks.sample import SanityData
from ctpipe.components.steps.sanity_checks.short_training import (
    LossFn,
    StepTracker,
    eval_logits,
    eval_loss,
    run_steps,
    trainer_precision,
)
from ctpipe.components.steps.sanity_checks.training_checks import (
    check_finite,
    check_overfit_one_batch,
    check_short_training,
)
from ctpipe.components.steps.sanity_checks.unused_inputs import check_unused_inputs
from ctpipe.components.tasks.protocol import CheckResult

__all__ = ["CheckResult", "SanityResult", "check_model"]

INPUT_DEPENDENCE_MIN = 1e-6
GRADIENT_ROWS = 64
# Trainer steps after which a parameter without a gradient at init is asked again (zero-initialised layers).
GRADIENT_RETRY_STEPS = 5
# Trainer steps after which every structural check runs again (a leak behind a zero weight shows once it moves).
WARM_UP_STEPS = GRADIENT_RETRY_STEPS
# The same batch evaluated twice agrees to this (relative): eval mode must not draw random numbers.
EVAL_DETERMINISM_RTOL = 1e-6


def check_model(factory: Callable[[], Any], data: SanityData, cfg: Config, task: Any, *,
                loss_fn: LossFn | None = None) -> list[CheckResult]:
    """Run every model check with fresh models from ``factory`` (each seeded), the task and ``loss_fn``
    (None: the task's own loss)."""
    tracker = StepTracker()
    timed: list[CheckResult] = []
    ctx = CheckContext(factory, data, task, loss_fn or task.objective.loss, loss_fn, trainer_precision(cfg))

    def timed_run(fn, *args):
        start = time.perf_counter()
        res = fn(*args)
        items = res if isinstance(res, list) else [res]
        for item in items:
            item.seconds = (time.perf_counter() - start) / len(items)
        timed.extend(items)

    timed_run(check_loss_probes, ctx)
    timed_run(check_init_loss, ctx, cfg.sanity.init_loss_tolerance)
    timed_run(check_input_dependence, ctx, cfg)
    timed_run(check_gradients_flow, ctx, cfg)
    timed_run(check_unused_inputs, ctx, cfg)
    timed_run(check_eval_determinism, ctx)
    timed_run(check_independence, ctx, cfg)
    timed_run(task_checks, ctx, cfg)
    timed_run(check_overfit_one_batch, ctx, cfg, tracker)
    timed_run(check_short_training, ctx, cfg, tracker)
    timed.append(check_finite(tracker, ctx.precision))
    return timed


def task_checks(ctx: CheckContext, cfg: Config) -> list[CheckResult]:
    """The task's own checks (``Task.extra_checks``), e.g. causality and next-token targets for a language model,
    on the fresh model and again after ``WARM_UP_STEPS`` of the trainer's steps."""
    fresh = list(ctx.task.checks.extra_checks(ctx.factory, ctx.data.train, ctx.data.state))
    steps = max(ctx.warm_up_steps, WARM_UP_STEPS)
    warmed = list(ctx.task.checks.extra_checks(lambda: warmed_up(ctx, cfg, ctx.factory(), steps), ctx.data.train,
                                        ctx.data.state))
    return at_init_and_warmed_up(fresh, warmed, steps, zero_layers=bool(ctx.warm_up_steps))


def warmed_up(ctx: CheckContext, cfg: Config, model: Any, steps: int) -> Any:
    """``model`` after ``steps`` of the trainer's optimizer step (in its precision) on the first ``GRADIENT_ROWS``
    train examples."""
    part = ctx.data.train.select(slice(0, GRADIENT_ROWS))
    run_steps(model, ctx.loss_fn, part, cfg, steps=steps, batch_size=len(part), seed=3, tracker=StepTracker(),
              where="warm-up", autocast=ctx.precision.autocast)
    return model


def at_init_and_warmed_up(fresh: list[CheckResult], warmed: list[CheckResult], steps: int, *,
                          zero_layers: bool) -> list[CheckResult]:
    """One result per structural check: the fresh model's, unless only the warmed-up model fails it.

    A leak multiplied by a zero-initialised weight (an attention output projection, a LoRA B) is invisible at
    init and shows once that weight moves; the warmed-up failure then names the steps it took.
    """
    late = {r.name: r for r in warmed if not r.passed}
    why = ("zero-initialised layers hide part of the model from the output at init" if zero_layers else
           "it passes at init: a path that exists only once a weight is non-zero, e.g. a zero-initialised projection")
    out = []
    for result in fresh:
        if result.passed and result.name in late:
            result = late[result.name]
            result.message = f"after {steps} training steps ({why}): {result.message}"
        out.append(result)
    return out


# --- the checks, in the order check_model runs them ------------------------------------------------


def check_loss_probes(ctx: CheckContext) -> list[CheckResult]:
    """The loss alone (``loss_probes.py``): an oracle scores near zero, one a position off does not, padding
    changes nothing; on outputs of the model's shape for the first rows of the sample."""
    part = ctx.data.train.select(slice(0, 8))
    outputs = eval_logits(ctx.factory(), part.inputs)
    found = [check_loss_oracle(ctx.loss_fn, outputs, part.targets), check_loss_padding(ctx.loss_fn, outputs, part.targets)]
    return [result for result in found if result is not None]


def check_init_loss(ctx: CheckContext, tol: float) -> list[CheckResult]:
    """The task's expected losses at initialisation (``Task.init_losses``), each on a fresh model.

    For classification: ln C with a uniform output layer, H(prior) with the prior bias (the trainer's
    initialisation), and torch's raw default init as a warning (its logits have a spread of their own).
    """
    out = []
    for case in ctx.task.checks.init_losses(ctx.data.train.targets, ctx.data.state, tol):
        model = ctx.factory()
        if not case.applies(model):
            continue
        case.initialise(model)
        loss = eval_loss(model, ctx.loss_fn, ctx.data.train)
        ok = abs(loss - case.expected) <= case.tolerance
        out.append(CheckResult(
            case.name, ok, loss, f"abs(loss - {case.expected:.4f}) <= {case.tolerance:.4f}",
            f"loss at init {loss:.4f} vs {case.what}" + ("" if ok or case.severity == "warning" else case.hint),
            severity=case.severity))
    return out


def check_input_dependence(ctx: CheckContext, cfg: Config) -> CheckResult:
    """The output at init varies across examples (a model that ignores its input does not); an output that
    does not vary at init (a zero-initialised head) is asked again after ``GRADIENT_RETRY_STEPS`` of the
    trainer's steps."""
    sample = ctx.data.train.select(slice(0, 256))
    model = ctx.factory()
    logits = eval_logits(model, sample.inputs)
    spread = float(logits.std(dim=0).max()) if len(logits) > 1 else 0.0
    when = "at init"
    if not spread > INPUT_DEPENDENCE_MIN and len(logits) > 1:
        run_steps(model, ctx.loss_fn, sample, cfg, steps=GRADIENT_RETRY_STEPS, batch_size=len(sample), seed=3,
                  tracker=StepTracker(), where="input_dependence")
        spread = float(eval_logits(model, sample.inputs).std(dim=0).max())
        when = f"after {GRADIENT_RETRY_STEPS} training steps (none at init: a zero-initialised output layer?)"
        ctx.warm_up_steps = GRADIENT_RETRY_STEPS
    ok = spread > INPUT_DEPENDENCE_MIN
    return CheckResult(
        "input_dependence", ok, spread, f"> {INPUT_DEPENDENCE_MIN:g}",
        f"largest per-output std of the model's output across {len(logits)} examples {when} is {spread:.3g}"
        + ("" if ok else "; the output ignores the input: check that forward() uses its inputs"))


def _gradients(model, loss_fn, part) -> tuple[list, float, list]:
    """(trainable named parameters, total gradient norm, those whose gradient is missing or all zero) of one
    backward of the loss on ``part``."""
    import torch

    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    loss_fn(model(*part.inputs).float(), part.targets).backward()
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    norms = [p.grad.detach().float().norm() for _, p in trainable if p.grad is not None]
    norm = float(torch.stack(norms).norm()) if norms else 0.0
    dead = [(name, p) for name, p in trainable if p.grad is None or not bool((p.grad != 0).any())]
    return trainable, norm, dead


def check_gradients_flow(ctx: CheckContext, cfg: Config) -> CheckResult:
    """Every trainable parameter gets a non-zero, finite gradient from the loss (trainer's init).

    A parameter tensor counts as reached when any of its entries has a non-zero gradient (an embedding
    gets gradients only in the rows of the categories the batch holds). One that gets none at init is
    asked again after ``GRADIENT_RETRY_STEPS`` of the trainer's steps: a zero-initialised layer (a LoRA
    adapter's B, a zero head) holds the gradient back from the layers before it only until it moves;
    a detached or unused layer never gets one.
    """
    model = ctx.trained_init().train()
    part = ctx.data.train.select(slice(0, GRADIENT_ROWS))
    trainable, norm, dead = _gradients(model, ctx.loss_fn, part)
    late: list = []
    if dead and math.isfinite(norm) and norm > 0.0:
        run_steps(model, ctx.loss_fn, part, cfg, steps=GRADIENT_RETRY_STEPS, batch_size=len(part), seed=3,
                  tracker=StepTracker(), where="gradients_flow")
        still = {name for name, _ in _gradients(model, ctx.loss_fn, part)[2]}
        late = [name for name, _ in dead if name not in still]
        dead = [(name, p) for name, p in dead if name in still]
        ctx.warm_up_steps = GRADIENT_RETRY_STEPS if late else ctx.warm_up_steps
    total = sum(p.numel() for _, p in trainable)
    reached = 1.0 - sum(p.numel() for _, p in dead) / total if total else 0.0
    ok = math.isfinite(norm) and norm > 0.0 and not dead
    text = (f"gradient norm of the loss at init is {norm:.4g}; {len(trainable) - len(dead)} of {len(trainable)} "
            f"trainable parameter tensors ({reached:.1%} of the {total} parameters) get a non-zero gradient")
    if not math.isfinite(norm):
        text += "; the gradient is NaN/Inf at init: check the loss and the inputs for NaN/Inf"
    elif norm == 0.0:
        text += ("; no gradient reaches the parameters: a clamped/clipped loss or a detached output "
                 "(clip gradients with clip_grad_norm_, never the loss)")
    elif dead:
        names = ", ".join(name for name, _ in dead[:6]) + (", …" if len(dead) > 6 else "")
        text += (f"; no gradient reaches {names}: part of the model is cut off from the loss (a .detach(), .data, "
                 "torch.no_grad() or an unused layer), so it would never train; freeze parameters on purpose with "
                 "requires_grad=False")
    if late:
        names = ", ".join(late[:6]) + (", …" if len(late) > 6 else "")
        text += f"; reached only after {GRADIENT_RETRY_STEPS} training steps (zero-initialised layers): {names}"
    return CheckResult("gradients_flow", ok, reached, "every trainable parameter > 0, norm finite", text)


def check_eval_determinism(ctx: CheckContext) -> CheckResult:
    """Two evaluations of the same batch in eval mode give the same outputs: dropout or another random layer
    left on at evaluation makes every validation score, checkpoint choice and blessing noisy."""
    sample = ctx.data.train.select(slice(0, GRADIENT_ROWS))
    model = ctx.trained_init()
    first, second = eval_logits(model, sample.inputs), eval_logits(model, sample.inputs)
    change = float((first - second).abs().max()) / max(1.0, float(first.abs().max())) if first.numel() else 0.0
    ok = change <= EVAL_DETERMINISM_RTOL
    text = (f"two evaluations of the same {len(sample)} examples in eval mode differ by {change:.3g} (relative to the "
            "largest output)")
    if not ok:
        text = ("dropout active at evaluation: " + text + "; a dropout or random layer ignores model.eval() "
                "(F.dropout(x, training=True), a layer forced into training mode, noise added in forward()), so every "
                "validation score, checkpoint choice and blessing would be noisy")
    return CheckResult("eval_determinism", ok, change, f"<= {EVAL_DETERMINISM_RTOL:g}", text)


def check_independence(ctx: CheckContext, cfg: Config) -> list[CheckResult]:
    """Batch independence (``independence.py``) of a fresh model initialised as the trainer does, also over a
    batch of ``train.batch_size`` rows, and again after ``WARM_UP_STEPS`` of the trainer's steps (more when
    zero-initialised layers hide part of the model at init): a mixing behind a zero weight shows only then."""
    fresh = check_batch_independence(ctx.trained_init(), ctx.data.train, cfg.train.batch_size)
    steps = max(ctx.warm_up_steps, WARM_UP_STEPS)
    warmed = check_batch_independence(warmed_up(ctx, cfg, ctx.trained_init(), steps), ctx.data.train,
                                      cfg.train.batch_size)
    return at_init_and_warmed_up(fresh, warmed, steps, zero_layers=bool(ctx.warm_up_steps))
