"""The checks that train: overfit one batch, the short training (loss decreases, beats the zero-input
baseline) and finiteness, each with the trainer's own optimizer step in the precision training computes in."""

from __future__ import annotations

import math

from ctpipe.components.lib.config import Config
from ctpipe.components.steps.sanity_checks.context import CheckContext
from ctpipe.components.steps.sanity_checks.paired_gain import PairedGain, paired_gain
from ctpipe.components.steps.sanity_checks.short_training import (
    StepTracker,
    TrainerPrecision,
    eval_logits,
    run_steps,
)
from ctpipe.components.tasks.protocol import CheckResult

# Looks of the sequential short training: its steps, then twice as many when the first look is inconclusive.
SHORT_TRAIN_LOOKS = 2


def overfit_batch_rows(y, size: int):
    """``size`` examples taking the classes in turn (rarest first): at least two classes when there are.

    Targets that are not one class index per example (e.g. token sequences) take the first ``size``."""
    import torch

    if y.dim() != 1 or y.is_floating_point():
        return torch.arange(min(size, len(y)))
    by_class = [torch.nonzero(y == c).flatten() for c in torch.bincount(y).argsort() if (y == c).any()]
    picked: list[int] = []
    depth = 0
    while len(picked) < min(size, len(y)):
        for rows in by_class:
            if depth < len(rows) and len(picked) < size:
                picked.append(int(rows[depth]))
        depth += 1
    return torch.tensor(picked, dtype=torch.long)


def check_overfit_one_batch(ctx: CheckContext, cfg: Config, tracker: StepTracker) -> CheckResult:
    """Memorise ``sanity.overfit_batch_size`` examples (of at least two classes for class targets): loss
    below the bound and, where the task has an ``accuracy`` metric, 100% of it."""
    s = cfg.sanity
    model = ctx.trained_init()
    batch = ctx.data.train.select(overfit_batch_rows(ctx.data.train.targets, s.overfit_batch_size))
    yb = batch.targets
    class_targets = yb.dim() == 1 and not yb.is_floating_point()
    classes = int(len(set(yb.tolist()))) if class_targets else 0

    def scores() -> tuple[float, float | None]:
        logits = eval_logits(model, batch.inputs, ctx.precision.autocast)
        metrics = ctx.task.objective.row_metrics(logits, yb)
        accuracy = float(metrics["accuracy"].double().mean()) if "accuracy" in metrics else None
        return float(ctx.loss_fn(logits, yb)), accuracy

    def memorised() -> bool:
        loss, accuracy = scores()
        return (accuracy is None or accuracy == 1.0) and loss < s.overfit_max_loss

    steps = run_steps(model, ctx.loss_fn, batch, cfg, steps=s.overfit_steps, batch_size=len(batch), seed=1,
                       tracker=tracker, where=f"overfit{ctx.precision.words}", stop=memorised,
                       autocast=ctx.precision.autocast)
    final, accuracy = scores()
    ok = (math.isfinite(final) and final < s.overfit_max_loss and accuracy in (None, 1.0)
          and (classes >= 2 or not class_targets))
    what = f"of {classes} classes " if class_targets else ""
    text = (f"a batch of {len(batch)} rows {what}after {steps} steps of the trainer's optimizer step"
            f"{ctx.precision.words}: "
            f"loss {final:.4g}" + (f", accuracy {accuracy:.0%}" if accuracy is not None else ""))
    if class_targets and classes < 2:
        text += "; the sample holds a single class, so memorising it proves nothing: check the label column"
    elif not ok:
        text += ("; the model cannot memorise a handful of examples: check the loss, the learning rate, that "
                 "gradients reach the parameters (and that they are trainable) and that inputs and labels are aligned"
                 + _precision_hint(ctx.precision))
    return CheckResult("overfit_one_batch", ok, final,
                       f"< {s.overfit_max_loss} and 100% accuracy within {s.overfit_steps} steps", text)


def check_short_training(ctx: CheckContext, cfg: Config, tracker: StepTracker) -> list[CheckResult]:
    """The same short training twice, on the data and on zeroed inputs, each judged by an interval.

    ``loss_decreases``: the per-row drop of the train sample's loss, relative to the loss at init, against
    ``sanity.loss_decrease_min``. ``beats_zero_input_baseline``: the per-row held-out loss gain over the
    same model trained and evaluated on zeroed inputs (the best an input-blind model does), relative to
    that model's loss, against ``sanity.baseline_min_improvement``. Each passes when its one-sided bounds
    lie above the margin and fails when they lie at or below it. The gain also fails as "no signal" when
    its upper bound lies below ``sanity.useful_gain_min`` (an equivalence test: labels that carry no
    information, as shuffled ones), decided on the longest training only. When either interval straddles its
    margin (or the gain looks like no signal) the training extends to ``SHORT_TRAIN_LOOKS`` times the steps and
    is judged again (a sequential test: each look at
    1 - (1 - ``sanity.confidence``) / looks, so the error rate over all looks stays at most
    1 - ``sanity.confidence``); still straddling, it warns without blocking (a weak signal in few rows).
    """
    s = cfg.sanity
    level = 1.0 - (1.0 - s.confidence) / SHORT_TRAIN_LOOKS  # Bonferroni over the looks
    for look in range(1, SHORT_TRAIN_LOOKS + 1):
        steps = look * s.short_train_steps
        drop, gain, where = _short_training(ctx, cfg, tracker, steps, level)
        verdicts = (drop.verdict(s.loss_decrease_min), gain.verdict(s.baseline_min_improvement, s.useful_gain_min))
        # Only pass and fail are decided at the first look; "no signal" is confirmed on the longer training, where
        # a weak real signal has grown and fitted noise has not.
        if set(verdicts) <= {"pass", "fail"} or verdicts[1] == "fail":
            break
    shown = f"{level:.1%}"
    looked = "" if look == 1 else f" (extended from {s.short_train_steps}: the first look was inconclusive)"
    out = [_judged(
        "loss_decreases", drop, s.loss_decrease_min, "relative drop",
        f"per-row loss of the {drop.rows}-row train sample {drop.reference_loss:.4f} -> "
        f"{drop.reference_loss - drop.mean:.4f} after {steps} steps{looked} of the trainer's optimizer step"
        f"{ctx.precision.words}: drop {drop.relative:.2%}, {shown} bounds [{drop.lower:.2%}, {drop.upper:.2%}]",
        "training does not reduce the loss: check the learning rate and its schedule, the loss and the optimiser "
        "wiring, or, if one batch can be overfit, whether the labels depend on the features"
        + _precision_hint(ctx.precision))]
    figures = (f"{where} loss {gain.reference_loss - gain.mean:.4f} vs {gain.reference_loss:.4f} for the same model fed "
               f"zeroed inputs, same {steps} steps{looked}, over {gain.rows} rows: gain {gain.relative:.2%}, {shown} "
               f"bounds [{gain.lower:.2%}, {gain.upper:.2%}]")
    if gain.verdict(s.baseline_min_improvement, s.useful_gain_min) == "no_signal":
        out.append(CheckResult(
            "beats_zero_input_baseline", False, gain.relative,
            f"relative gain: upper bound below sanity.useful_gain_min = {s.useful_gain_min:g} is no signal",
            f"no signal: the held-out gain over an input-blind model is at most {gain.upper:.2%}, under the smallest "
            f"useful gain {s.useful_gain_min:.2%} (sanity.useful_gain_min) with {shown} confidence; {figures}; the "
            "labels carry no information about the inputs: shuffled labels, or a join that scrambles them (check how "
            "labels are joined to the rows; lower sanity.useful_gain_min only if so small a gain is worth training)"))
    else:
        out.append(_judged(
            "beats_zero_input_baseline", gain, s.baseline_min_improvement, "relative gain", figures,
            "the model does no better than one that never sees the input: the features may not be related to the "
            "labels (shuffled or misaligned labels?) or the model ignores them" + _precision_hint(ctx.precision)))
    return out


def _short_training(ctx: CheckContext, cfg: Config, tracker: StepTracker, steps: int,
                    level: float) -> tuple[PairedGain, PairedGain, str]:
    """Train on the data and on zeroed inputs for ``steps``: (train-sample loss drop, held-out gain over the
    zeroed-input model, which rows the gain is over), with bounds at ``level``."""
    import torch

    from ctpipe.components.tasks import Batch

    train = ctx.data.train
    held_out = len(ctx.data.val) > 1
    val = ctx.data.val if held_out else train

    def zeroed(batch):
        return Batch(tuple(torch.zeros_like(x) for x in batch.inputs), batch.targets)

    rows = {}
    for name, batch in {"real": train, "zeroed": zeroed(train)}.items():
        model = ctx.trained_init()
        if name == "real":
            before = ctx.row_losses(model, batch)
        run_steps(model, ctx.loss_fn, batch, cfg, steps=steps, batch_size=cfg.train.batch_size, seed=2,
                   tracker=tracker, where=f"short training ({name}){ctx.precision.words}",
                   autocast=ctx.precision.autocast)
        if name == "real":
            rows["train_after"] = ctx.row_losses(model, batch)
        rows[name] = ctx.row_losses(model, zeroed(val) if name == "zeroed" else val)
    where = "held-out" if held_out else "train-sample (no held-out rows)"
    return (paired_gain(before, rows["train_after"], level), paired_gain(rows["zeroed"], rows["real"], level), where)


def _precision_hint(precision: TrainerPrecision) -> str:
    if precision.name != "bf16":
        return ""
    return ("; it trained in bf16, as the trainer will (train.mixed_precision): if it passes with "
            "train.mixed_precision=fp32, the model loses precision in bf16 (inputs with a large offset, like a raw "
            "year or timestamp, or a variance taken as E[x^2] - E[x]^2)")


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


def check_finite(tracker: StepTracker, precision: TrainerPrecision) -> CheckResult:
    ok = tracker.non_finite == 0
    return CheckResult(
        "finite", ok, float(tracker.non_finite), "0 non-finite steps",
        f"{tracker.non_finite} of {tracker.steps} training steps had a NaN/Inf loss or gradient"
        + ("" if ok else f"; first at {tracker.first_bad}: check for log(0), division by zero or a too-high learning rate"
           + _precision_hint(precision)))
