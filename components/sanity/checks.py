"""Sanity checks: cheap tests of the configured model on a sample of the real data, before training.

They follow the seed guides' "trustworthy skeleton" advice and fail the run on a hard failure:

* ``init_loss_uniform``: with the output layer initialised to a uniform prior the loss at init is
  ln C = -log(1/C) for C classes (torch's default init is reported as ``init_loss_default``);
* ``init_loss_prior``: with the head bias set to the log class prior (``init_output_bias``, which the
  trainer uses), the loss at init is the label entropy H(prior) of the sample;
* ``input_dependence``: the output changes with the input;
* ``gradients_flow``: every trainable parameter gets a non-zero, finite gradient at init;
* ``batch_independence`` (eval mode) and ``batch_independence_train_mode``: no row's output depends on
  another row's input, for every pair of rows of a small batch (gradients and perturbations);
* ``overfit_one_batch``: a tiny batch of at least two classes is memorised (100% accuracy, near-zero loss);
* ``loss_decreases``: the short training lowers the per-row loss of the sample beyond its noise;
* ``beats_zero_input_baseline``: after the same short training the model beats, on held-out rows and
  beyond the noise of the per-row loss difference, the same model fed zeroed inputs;
* ``finite``: no NaN/Inf in any loss or gradient; ``first_batch_roundtrip``: the first batch's tensors
  decode back to the raw values (and are saved as an artifact).

Every training here is the trainer's own optimizer step (``short_training.run_steps``: AdamW, the
warmup + cosine schedule, clipping, accumulation) on one process, so a bug there is gated too.
``check_model`` runs them all; ``gate.run_sanity_checks`` is the step around it (sample, dump, report).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from components.config import Config
from components.sanity.paired_gain import PairedGain, paired_gain
from components.sanity.report import CheckResult, SanityResult
from components.sanity.sample import SanityData
from components.sanity.short_training import (
    LossFn,
    StepTracker,
    class_prior,
    eval_logits,
    eval_loss,
    row_losses,
    run_steps,
    trainer_init,
)

__all__ = ["CheckResult", "SanityResult", "check_model"]

INDEPENDENCE_ROWS = 8
INDEPENDENCE_TOL = 1e-6
INPUT_DEPENDENCE_MIN = 1e-6
GRADIENT_ROWS = 64
# Torch's default init leaves logits with a spread of their own: a loose bound, and a warning only.
DEFAULT_INIT_TOLERANCE = 0.25


def check_model(factory: Callable[[], Any], data: SanityData, cfg: Config, *, loss_fn: LossFn | None = None) -> list[CheckResult]:
    """Run every model check with fresh models from ``factory`` (each seeded) and ``loss_fn``."""
    import torch

    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    tracker = StepTracker()
    timed: list[CheckResult] = []

    def timed_run(fn, *args):
        start = time.perf_counter()
        res = fn(*args)
        items = res if isinstance(res, list) else [res]
        for item in items:
            item.seconds = (time.perf_counter() - start) / len(items)
        timed.extend(items)

    timed_run(check_init_loss, factory, data, loss_fn, cfg.sanity.init_loss_tolerance)
    timed_run(check_input_dependence, factory, data)
    timed_run(check_gradients_flow, factory, data, loss_fn)
    timed_run(check_batch_independence, factory, data)
    timed_run(check_overfit_one_batch, factory, data, loss_fn, cfg, tracker)
    timed_run(check_short_training, factory, data, loss_fn, cfg, tracker)
    timed.append(check_finite(tracker))
    return timed


# --- the checks, in the order check_model runs them ------------------------------------------------


def check_init_loss(factory, data: SanityData, loss_fn, tol: float) -> list[CheckResult]:
    """Loss at init: ln C with a uniform output layer, H(prior) with the prior bias, and the raw default init.

    The head is initialised as the trainer does (``init_output_bias``: small weights, bias = log prior).
    With a uniform prior the output is uniform and the loss must be ln C = -log(1/C); with the label
    prior it must be the label entropy. Torch's default init (which the trainer does not use) is
    reported as a warning: its logits have a spread of their own, so its loss sits above ln C.
    """
    import torch

    c = data.n_classes
    ln_c = math.log(c)
    bound = tol * ln_c
    prior = class_prior(data.y, c)
    entropy = float(-(prior[prior > 0] * prior[prior > 0].log()).sum())
    out = []
    model = factory()
    loss = eval_loss(model, loss_fn, data.x_num, data.x_cat, data.y)
    ok = abs(loss - ln_c) <= DEFAULT_INIT_TOLERANCE * ln_c
    out.append(CheckResult(
        "init_loss_default", ok, loss, f"abs(loss - ln C) <= {DEFAULT_INIT_TOLERANCE * ln_c:.4f} (ln {c} = {ln_c:.4f})",
        f"loss at init {loss:.4f} vs ln {c} = {ln_c:.4f} with torch's default initialisation (reported only: "
        "the trainer initialises the head itself)", severity="warning"))
    if not hasattr(model, "head"):
        return out
    for name, target_prior, target, label in (
        ("init_loss_uniform", torch.full((c,), 1.0 / c), ln_c, f"ln {c} = {ln_c:.4f}"),
        ("init_loss_prior", prior.float(), entropy, f"the label entropy H = {entropy:.4f}"),
    ):
        model = trainer_init(factory(), target_prior)
        loss = eval_loss(model, loss_fn, data.x_num, data.x_cat, data.y)
        ok = abs(loss - target) <= bound
        which = "a uniform" if name == "init_loss_uniform" else "the class"
        out.append(CheckResult(
            name, ok, loss, f"abs(loss - {target:.4f}) <= {bound:.4f}",
            f"loss at init {loss:.4f} vs {label} with the head bias set to {which} prior"
            + ("" if ok else "; the loss at init is not what the initial output implies: check that the loss takes "
               "logits (not probabilities), that labels are class indices, and the model's output layer")))
    return out


def check_input_dependence(factory, data: SanityData) -> CheckResult:
    """The output at init varies across examples (a model that ignores its input does not)."""
    logits = eval_logits(factory(), data.x_num[:256], data.x_cat[:256])
    spread = float(logits.std(dim=0).max()) if len(logits) > 1 else 0.0
    ok = spread > INPUT_DEPENDENCE_MIN
    return CheckResult(
        "input_dependence", ok, spread, f"> {INPUT_DEPENDENCE_MIN:g}",
        f"largest per-class std of the logits across {len(logits)} examples at init is {spread:.3g}"
        + ("" if ok else "; the output ignores the input: check that forward() uses x_num and x_cat"))


def check_gradients_flow(factory, data: SanityData, loss_fn) -> CheckResult:
    """Every trainable parameter gets a non-zero, finite gradient from the loss at init (trainer's init).

    A parameter tensor counts as reached when any of its entries has a non-zero gradient (an embedding
    gets gradients only in the rows of the categories the batch holds).
    """
    import torch

    model = trainer_init(factory(), class_prior(data.y, data.n_classes)).train()
    n = min(GRADIENT_ROWS, len(data.y))
    torch.manual_seed(0)
    loss_fn(model(data.x_num[:n], data.x_cat[:n]).float(), data.y[:n]).backward()
    trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    norms = [p.grad.detach().float().norm() for _, p in trainable if p.grad is not None]
    norm = float(torch.stack(norms).norm()) if norms else 0.0
    dead = [(name, p) for name, p in trainable if p.grad is None or not bool((p.grad != 0).any())]
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
    return CheckResult("gradients_flow", ok, reached, "every trainable parameter > 0, norm finite", text)


def _gradient_leak(model, x_num, x_cat) -> tuple[float, tuple[int, int]]:
    """Largest abs(d out_i / d x_j) over rows j != i, and (i, j) where it is: one backward per output row."""
    import torch

    if x_num.shape[1] == 0 or len(x_num) < 2:
        return 0.0, (0, 0)
    x = x_num.clone().requires_grad_(True)
    torch.manual_seed(0)
    out = model(x, x_cat).float()
    if not out.requires_grad:
        return 0.0, (0, 0)
    worst, where = 0.0, (0, 0)
    for i in range(len(x)):
        (grad,) = torch.autograd.grad(out[i].sum(), x, retain_graph=True, allow_unused=True)
        if grad is None:
            continue
        grad = grad.abs().amax(dim=1)
        grad[i] = 0.0
        j = int(grad.argmax())
        if float(grad[j]) > worst:
            worst, where = float(grad[j]), (i, j)
    return worst, where


def _perturbation_leak(model, x_num, x_cat) -> tuple[float, tuple[int, int]]:
    """Largest change of row i's output when only row j's input changes (j in turn, same dropout masks)."""
    import torch

    if len(x_num) < 2:
        return 0.0, (0, 0)
    with torch.no_grad():
        torch.manual_seed(0)
        base = model(x_num, x_cat).float()
        worst, where = 0.0, (0, 0)
        for j in range(len(x_num)):
            x_num2, x_cat2 = x_num.clone(), x_cat.clone()
            x_num2[j] += 1.0
            x_cat2[j] = x_cat[(j + 1) % len(x_cat)]
            torch.manual_seed(0)
            change = (model(x_num2, x_cat2).float() - base).abs().amax(dim=1)
            change[j] = 0.0
            i = int(change.argmax())
            if float(change[i]) > worst:
                worst, where = float(change[i]), (i, j)
    return worst, where


def check_batch_independence(factory, data: SanityData) -> list[CheckResult]:
    """No row's output depends on another row's input: all pairs of a small batch, in eval and in train mode.

    Train mode mixes rows legitimately only through batch normalisation: a model with a BatchNorm
    layer gets a warning there instead of an error.
    """
    from torch import nn

    model = trainer_init(factory(), class_prior(data.y, data.n_classes))
    rows = min(INDEPENDENCE_ROWS, len(data.y))
    x_num, x_cat = data.x_num[:rows], data.x_cat[:rows]
    batch_norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    out = []
    for name, train_mode in (("batch_independence", False), ("batch_independence_train_mode", True)):
        model.train(train_mode)
        grad_leak, (gi, gj) = _gradient_leak(model, x_num, x_cat)
        change, (pi, pj) = _perturbation_leak(model, x_num, x_cat)
        leak = max(grad_leak, change)
        ok = leak <= INDEPENDENCE_TOL
        mode = "train" if train_mode else "eval"
        text = (f"in {mode} mode, over all {rows} rows: max abs(d out_i / d x_j) (j != i) = {grad_leak:.3g}"
                + (f" (row {gi} from row {gj})" if grad_leak > INDEPENDENCE_TOL else "")
                + f", max change of row i's output when only row j's input changes = {change:.3g}"
                + (f" (row {pi} when row {pj} changes)" if change > INDEPENDENCE_TOL else ""))
        severity = "warning" if train_mode and batch_norm else "error"
        if not ok and severity == "warning":
            text += " (expected in train mode with batch normalisation, which the model has)"
        elif not ok:
            text += ("; information flows between examples of a batch (a batch statistic such as a batch mean, a "
                     "BatchNorm forced into training mode, or indexing the batch dimension, e.g. x[0] where x[:, 0] "
                     "was meant): predictions would depend on batch composition")
        out.append(CheckResult(name, ok, leak, f"<= {INDEPENDENCE_TOL:g}", text, severity=severity))
    return out


def overfit_batch_rows(y, size: int):
    """``size`` rows of the sample taking the classes in turn (rarest first): at least two classes when there are."""
    import torch

    by_class = [torch.nonzero(y == c).flatten() for c in torch.bincount(y).argsort() if (y == c).any()]
    picked: list[int] = []
    depth = 0
    while len(picked) < min(size, len(y)):
        for rows in by_class:
            if depth < len(rows) and len(picked) < size:
                picked.append(int(rows[depth]))
        depth += 1
    return torch.tensor(picked, dtype=torch.long)


def check_overfit_one_batch(factory, data: SanityData, loss_fn, cfg: Config, tracker: StepTracker) -> CheckResult:
    """Memorise ``sanity.overfit_batch_size`` rows of at least two classes: 100% accuracy, loss below the bound."""
    s = cfg.sanity
    model = trainer_init(factory(), class_prior(data.y, data.n_classes))
    idx = overfit_batch_rows(data.y, s.overfit_batch_size)
    xb, cb, yb = data.x_num[idx], data.x_cat[idx], data.y[idx]
    classes = int(len(set(yb.tolist())))

    def memorised() -> bool:
        logits = eval_logits(model, xb, cb)
        return bool((logits.argmax(dim=1) == yb).all()) and float(loss_fn(logits, yb)) < s.overfit_max_loss

    steps = run_steps(model, loss_fn, xb, cb, yb, cfg, steps=s.overfit_steps, batch=len(yb), seed=1,
                       tracker=tracker, where="overfit", stop=memorised)
    logits = eval_logits(model, xb, cb)
    final = float(loss_fn(logits, yb))
    accuracy = float((logits.argmax(dim=1) == yb).double().mean())
    ok = math.isfinite(final) and final < s.overfit_max_loss and accuracy == 1.0 and classes >= 2
    text = (f"a batch of {len(yb)} rows of {classes} classes after {steps} steps of the trainer's optimizer step: "
            f"loss {final:.4g}, accuracy {accuracy:.0%}")
    if classes < 2:
        text += "; the sample holds a single class, so memorising it proves nothing: check the label column"
    elif not ok:
        text += ("; the model cannot memorise a handful of examples: check the loss, the learning rate, that "
                 "gradients reach the parameters (and that they are trainable) and that inputs and labels are aligned")
    return CheckResult("overfit_one_batch", ok, final,
                       f"< {s.overfit_max_loss} and 100% accuracy within {s.overfit_steps} steps", text)


def check_short_training(factory, data: SanityData, loss_fn, cfg: Config, tracker: StepTracker) -> list[CheckResult]:
    """The same short training twice, on the data and on zeroed inputs, each judged by an interval.

    ``loss_decreases``: the per-row drop of the train sample's loss, relative to the loss at init, against
    ``sanity.loss_decrease_min``. ``beats_zero_input_baseline``: the per-row held-out loss gain over the
    same model trained and evaluated on zeroed inputs (the best an input-blind model does), relative to
    that model's loss, against ``sanity.baseline_min_improvement``. Each passes when its one-sided
    ``sanity.confidence`` bounds lie above the margin, fails when they lie at or below it and warns,
    without blocking, when they straddle it (a weak signal in few rows).
    """
    import torch

    s, t = cfg.sanity, cfg.train
    prior = class_prior(data.y, data.n_classes)
    held_out = len(data.val_y) > 1
    vx, vc, vy = (data.val_x_num, data.val_x_cat, data.val_y) if held_out else (data.x_num, data.x_cat, data.y)
    variants = {
        "real": (data.x_num, data.x_cat, data.y),
        "zeroed": (torch.zeros_like(data.x_num), torch.zeros_like(data.x_cat), data.y),
    }
    rows = {}
    for name, (xn, xc, y) in variants.items():
        model = trainer_init(factory(), prior)
        if name == "real":
            before = row_losses(model, loss_fn, xn, xc, y)
        run_steps(model, loss_fn, xn, xc, y, cfg, steps=s.short_train_steps, batch=t.batch_size, seed=2,
                   tracker=tracker, where=f"short training ({name})")
        if name == "real":
            rows["train_after"] = row_losses(model, loss_fn, xn, xc, y)
        zero = name == "zeroed"
        rows[name] = row_losses(model, loss_fn, torch.zeros_like(vx) if zero else vx,
                                 torch.zeros_like(vc) if zero else vc, vy)
    level = f"{s.confidence:.0%}"
    drop = paired_gain(before, rows["train_after"], s.confidence)
    out = [_judged(
        "loss_decreases", drop, s.loss_decrease_min, "relative drop",
        f"per-row loss of the {drop.rows}-row train sample {drop.reference_loss:.4f} -> "
        f"{drop.reference_loss - drop.mean:.4f} after {s.short_train_steps} steps of the trainer's optimizer step: "
        f"drop {drop.relative:.2%}, {level} bounds [{drop.lower:.2%}, {drop.upper:.2%}]",
        "training does not reduce the loss: check the learning rate and its schedule, the loss and the optimiser "
        "wiring, or, if one batch can be overfit, whether the labels depend on the features")]
    where = "held-out" if held_out else "train-sample (no held-out rows)"
    gain = paired_gain(rows["zeroed"], rows["real"], s.confidence)
    out.append(_judged(
        "beats_zero_input_baseline", gain, s.baseline_min_improvement, "relative gain",
        f"{where} loss {gain.reference_loss - gain.mean:.4f} vs {gain.reference_loss:.4f} for the same model fed "
        f"zeroed inputs, same {s.short_train_steps} steps, over {gain.rows} rows: gain {gain.relative:.2%}, {level} "
        f"bounds [{gain.lower:.2%}, {gain.upper:.2%}]",
        "the model does no better than one that never sees the input: the features may not be related to the "
        "labels (shuffled or misaligned labels?) or the model ignores them"))
    return out


def _judged(name: str, gain: PairedGain, margin: float, what: str, figures: str, hint: str) -> CheckResult:
    """A training check from its interval: pass above the margin, fail at or below it, warn when it straddles it."""
    verdict = gain.verdict(margin)
    threshold = f"{what}: interval above {margin:g} passes, at or below fails"
    if verdict == "fail":
        return CheckResult(name, False, gain.relative, threshold, f"{figures}; {hint}")
    if verdict == "pass":
        return CheckResult(name, True, gain.relative, threshold, figures)
    return CheckResult(name, False, gain.relative, threshold, figures + f"; inconclusive: the interval holds {margin:g}, "
                       "too few rows to tell a weak signal from none (more data or sanity.sample_rows narrow it)",
                       severity="warning")


def check_finite(tracker: StepTracker) -> CheckResult:
    ok = tracker.non_finite == 0
    return CheckResult(
        "finite", ok, float(tracker.non_finite), "0 non-finite steps",
        f"{tracker.non_finite} of {tracker.steps} training steps had a NaN/Inf loss or gradient"
        + ("" if ok else f"; first at {tracker.first_bad}: check for log(0), division by zero or a too-high learning rate"))
