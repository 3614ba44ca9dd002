"""Sanity checks: cheap tests of the configured model on a sample of the real data, before training.

They follow the seed guides' "trustworthy skeleton" advice and fail the run on a hard failure:

* ``init_loss_uniform``: with the output layer initialised to a uniform prior the loss at init is
  ln C = -log(1/C) for C classes (torch's default init is reported as ``init_loss_default``);
* ``init_loss_prior``: with the head bias set to the log class prior (``init_output_bias``, which the
  trainer uses), the loss at init is the label entropy H(prior) of the sample;
* ``input_dependence``: the output changes with the input;
* ``gradients_flow``: the loss has a non-zero gradient at init (a clamped loss has none);
* ``batch_independence``: in eval mode, example i's output does not depend on example j's input;
* ``overfit_one_batch``: a tiny batch is memorised to near-zero loss within a step budget;
* ``loss_decreases`` and ``beats_zero_input_baseline``: after the same short training, the loss has
  fallen and the model on real inputs beats the same model fed zeroed inputs on held-out rows;
* ``finite``: no NaN/Inf in any loss or gradient; ``first_batch_roundtrip``: the first batch's tensors
  decode back to the raw values (and are saved as an artifact).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from components.config import Config
from components.data.snapshot import Preprocessing, Snapshot, encode_features, encode_labels, load_snapshot
from components.errors import SanityCheckError

LossFn = Callable[[Any, Any], Any]
SAMPLE_SEED = 0
LOSS_DECREASE_MIN = 0.01  # the short training must lower the sample loss by at least 1%
INDEPENDENCE_TOL = 1e-6
INPUT_DEPENDENCE_MIN = 1e-6
FIRST_BATCH_ROWS = 16
# Torch's default init leaves logits with a spread of their own: a loose bound, and a warning only.
DEFAULT_INIT_TOLERANCE = 0.25


@dataclass
class CheckResult:
    """One check's verdict with the figure it measured and the threshold it was held to."""

    name: str
    passed: bool
    value: float | None
    threshold: str
    message: str
    # error: fails the run; warning: reported only.
    severity: str = "error"
    seconds: float = 0.0


@dataclass
class SanityResult:
    """All checks of one run; ``passed`` is False when any error-severity check failed."""

    checks: list[CheckResult] = field(default_factory=list)
    skipped: bool = False
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed or c.severity != "error" for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed and c.severity == "error"]

    def summary(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "checks": {
                c.name: {"passed": c.passed, "value": _json_number(c.value), "threshold": c.threshold,
                         "message": c.message, "severity": c.severity}
                for c in self.checks
            },
        }


def _json_number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


@dataclass
class SanityData:
    """Encoded tensors of a train sample and a held-out (val) sample, plus what decodes them."""

    x_num: Any
    x_cat: Any
    y: Any
    val_x_num: Any
    val_x_cat: Any
    val_y: Any
    n_classes: int
    first_batch: FirstBatch


@dataclass
class FirstBatch:
    """The trainer's first batch on rank 0: its raw rows, the tensors made from them, and how it was drawn."""

    raw: Any
    x_num: Any
    x_cat: Any
    y: Any
    drawn: str


def trainer_first_batch_indices(n_train: int, cfg: Config) -> list[int]:
    """Row indices of rank 0's first batch as the trainer draws them (DistributedSampler, train.seed, epoch 0)."""
    from torch.utils.data import DistributedSampler

    sampler = DistributedSampler(range(n_train), num_replicas=cfg.train.workers, rank=0, shuffle=True,
                                 seed=cfg.train.seed, drop_last=True)
    sampler.set_epoch(0)
    return list(iter(sampler))[: cfg.train.batch_size]


def load_sanity_data(snapshot: Snapshot, cfg: Config, *, seed: int = SAMPLE_SEED) -> SanityData:
    """A seeded sample of the train split (and of val) encoded exactly as training encodes it."""
    import torch

    prep = snapshot.preprocessing
    full_train = snapshot.frame("train")
    val = snapshot.frame("val")
    sample_rows = cfg.sanity.sample_rows
    train = full_train.sample(n=min(sample_rows, len(full_train)), random_state=seed).reset_index(drop=True)
    val = val.sample(n=min(max(sample_rows // 2, 1), len(val)), random_state=seed).reset_index(drop=True)

    def tensors(frame):
        x_num, x_cat = encode_features(frame, prep)
        y = encode_labels(frame, snapshot.schema.label, prep.classes)
        return torch.tensor(x_num), torch.tensor(x_cat), torch.tensor(y)

    xn, xc, y = tensors(train)
    vn, vc, vy = tensors(val) if len(val) else (xn[:0], xc[:0], y[:0])
    try:
        rows = trainer_first_batch_indices(len(full_train), cfg)
        drawn = (f"rank 0 of {cfg.train.workers}, epoch 0: DistributedSampler(shuffle=True, seed={cfg.train.seed}, "
                 f"drop_last=True) over the {len(full_train)} train rows, first {cfg.train.batch_size}")
    except (ValueError, RuntimeError):
        rows, drawn = list(range(min(FIRST_BATCH_ROWS, len(full_train)))), "the first train rows"
    raw = full_train.iloc[rows].reset_index(drop=True)
    first = FirstBatch(raw, *tensors(raw), drawn=drawn)
    return SanityData(xn, xc, y, vn, vc, vy, len(prep.classes), first)


# --- the checks ----------------------------------------------------------------------------------


def _loss(model, loss_fn: LossFn, x_num, x_cat, y):
    return loss_fn(model(x_num, x_cat).float(), y)


def _eval_loss(model, loss_fn: LossFn, x_num, x_cat, y) -> float:
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        value = float(_loss(model, loss_fn, x_num, x_cat, y))
    model.train(was_training)
    return value


def _grads_finite(model) -> bool:
    import torch

    return all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def _grad_norm(model) -> float:
    import torch

    norms = [p.grad.detach().float().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.stack(norms).norm()) if norms else 0.0


class _Tracker:
    """Counts non-finite losses/gradients seen during any training in the checks."""

    def __init__(self) -> None:
        self.steps = 0
        self.non_finite = 0
        self.first_bad: str = ""

    def record(self, loss: float, grads_ok: bool, where: str) -> None:
        self.steps += 1
        if not math.isfinite(loss) or not grads_ok:
            self.non_finite += 1
            self.first_bad = self.first_bad or f"{where} step {self.steps}: loss {loss}, gradients finite: {grads_ok}"


class _Adam:
    """Plain Adam. torch.optim imports torch._dynamo on first use (about 3 s here), more than all checks cost."""

    def __init__(self, params, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        import torch

        self.params = [p for p in params if p.requires_grad]
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.lr, self.betas, self.eps, self.t = lr, betas, eps, 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        b1, b2 = self.betas
        self.t += 1
        with torch.no_grad():
            for p, m, v in zip(self.params, self.m, self.v, strict=True):
                if p.grad is None:
                    continue
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                denom = (v / (1 - b2**self.t)).sqrt_().add_(self.eps)
                p.addcdiv_(m, denom, value=-self.lr / (1 - b1**self.t))


def _train(model, loss_fn, x_num, x_cat, y, *, steps: int, batch: int, lr: float, seed: int, tracker: _Tracker,
           where: str, stop_below: float | None = None) -> tuple[list[float], int]:
    """Adam on random mini-batches (or the whole tensors when they fit in one batch); returns the losses."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    opt = _Adam(model.parameters(), lr=lr)
    model.train()
    losses: list[float] = []
    n = len(y)
    for step in range(steps):
        idx = torch.randint(0, n, (batch,), generator=gen) if n > batch else torch.arange(n)
        opt.zero_grad()
        loss = _loss(model, loss_fn, x_num[idx], x_cat[idx], y[idx])
        loss.backward()
        value = float(loss.detach())
        tracker.record(value, _grads_finite(model), where)
        losses.append(value)
        if not math.isfinite(value):
            break
        opt.step()
        if stop_below is not None and (step + 1) % 10 == 0 and _eval_loss(model, loss_fn, x_num, x_cat, y) < stop_below:
            return losses, step + 1
    return losses, steps


def _class_prior(y, n_classes: int):
    import torch

    counts = torch.bincount(y, minlength=n_classes).double()
    return counts / counts.sum()


def check_init_loss(factory, data: SanityData, loss_fn, tol: float) -> list[CheckResult]:
    """Loss at init: ln C with a uniform output layer, H(prior) with the prior bias, and the raw default init.

    The head is initialised as the trainer does (``init_output_bias``: small weights, bias = log prior).
    With a uniform prior the output is uniform and the loss must be ln C = -log(1/C); with the label
    prior it must be the label entropy. Torch's default init (which the trainer does not use) is
    reported as a warning: its logits have a spread of their own, so its loss sits above ln C.
    """
    import torch

    from components.models.tabular import init_output_bias

    c = data.n_classes
    ln_c = math.log(c)
    bound = tol * ln_c
    prior = _class_prior(data.y, c)
    entropy = float(-(prior[prior > 0] * prior[prior > 0].log()).sum())
    out = []
    model = factory()
    loss = _eval_loss(model, loss_fn, data.x_num, data.x_cat, data.y)
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
        model = factory()
        init_output_bias(model, target_prior)
        loss = _eval_loss(model, loss_fn, data.x_num, data.x_cat, data.y)
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
    import torch

    model = factory().eval()
    with torch.no_grad():
        logits = model(data.x_num[:256], data.x_cat[:256]).float()
    spread = float(logits.std(dim=0).max()) if len(logits) > 1 else 0.0
    ok = spread > INPUT_DEPENDENCE_MIN
    return CheckResult(
        "input_dependence", ok, spread, f"> {INPUT_DEPENDENCE_MIN:g}",
        f"largest per-class std of the logits across 256 examples at init is {spread:.3g}"
        + ("" if ok else "; the output ignores the input: check that forward() uses x_num and x_cat"))


def check_gradients_flow(factory, data: SanityData, loss_fn) -> CheckResult:
    """The loss at init has a non-zero, finite gradient with respect to the parameters."""
    model = factory().train()
    loss = _loss(model, loss_fn, data.x_num[:64], data.x_cat[:64], data.y[:64])
    loss.backward()
    norm = _grad_norm(model)
    ok = math.isfinite(norm) and norm > 0.0
    if ok:
        hint = ""
    elif not math.isfinite(norm):
        hint = "; the gradient is NaN/Inf at init: check the loss and the inputs for NaN/Inf"
    else:
        hint = ("; no gradient reaches the parameters: a clamped/clipped loss or a detached output "
                "(clip gradients with clip_grad_norm_, never the loss)")
    return CheckResult("gradients_flow", ok, norm, "> 0 and finite",
                       f"gradient norm of the loss at init is {norm:.4g}" + hint)


def _perturbation_gap(model, x_num, x_cat, j: int, *, seed: int) -> float:
    """Largest change of the outputs of rows != j when only row j's input changes (same RNG state)."""
    import torch

    x_num2, x_cat2 = x_num.clone(), x_cat.clone()
    x_num2[j] = x_num2[j] + 3.0
    x_cat2[j] = 0
    with torch.no_grad():
        torch.manual_seed(seed)
        a = model(x_num, x_cat).float()
        torch.manual_seed(seed)
        b = model(x_num2, x_cat2).float()
    others = [i for i in range(len(x_num)) if i != j]
    return float((a[others] - b[others]).abs().max())


def check_batch_independence(factory, data: SanityData) -> list[CheckResult]:
    """Eval mode: zero gradient of example 0's output w.r.t. other examples' inputs, and no perturbation leak."""
    model = factory()
    x_num = data.x_num[:8].clone().requires_grad_(True)
    x_cat = data.x_cat[:8]
    model.eval()
    model(x_num, x_cat)[0].float().sum().backward()
    has_grad = x_num.grad is not None and x_num.shape[1] > 0 and len(x_num) > 1
    grad_leak = float(x_num.grad[1:].abs().max()) if has_grad else 0.0
    gap_eval = _perturbation_gap(model, data.x_num[:8], data.x_cat[:8], 1, seed=0)
    leak = max(grad_leak, gap_eval)
    ok = leak <= INDEPENDENCE_TOL
    out = [CheckResult(
        "batch_independence", ok, leak, f"<= {INDEPENDENCE_TOL:g}",
        f"in eval mode, max abs(d out_0 / d x_j) (j != 0) = {grad_leak:.3g} and max change of other rows' outputs "
        f"when one row's input changes = {gap_eval:.3g}"
        + ("" if ok else "; information flows between examples of a batch (a batch statistic such as a batch "
           "mean, or a BatchNorm forced into training mode): predictions would depend on batch composition"))]
    model.train()
    gap_train = _perturbation_gap(model, data.x_num[:8], data.x_cat[:8], 1, seed=0)
    out.append(CheckResult(
        "batch_independence_train_mode", gap_train <= INDEPENDENCE_TOL, gap_train, f"<= {INDEPENDENCE_TOL:g}",
        f"in train mode other rows' outputs change by up to {gap_train:.3g} when one row changes"
        + ("" if gap_train <= INDEPENDENCE_TOL else " (expected only with batch normalisation)"),
        severity="warning"))
    return out


def check_overfit_one_batch(factory, data: SanityData, loss_fn, cfg: Config, tracker: _Tracker) -> CheckResult:
    """Memorise ``sanity.overfit_batch_size`` examples to below ``sanity.overfit_max_loss``."""
    s = cfg.sanity
    model = factory()
    n = min(s.overfit_batch_size, len(data.y))
    xb, cb, yb = data.x_num[:n], data.x_cat[:n], data.y[:n]
    _, steps = _train(model, loss_fn, xb, cb, yb, steps=s.overfit_steps, batch=n, lr=max(cfg.train.lr, 1e-3),
                      seed=1, tracker=tracker, where="overfit", stop_below=s.overfit_max_loss)
    final = _eval_loss(model, loss_fn, xb, cb, yb)
    ok = math.isfinite(final) and final < s.overfit_max_loss
    return CheckResult(
        "overfit_one_batch", ok, final, f"< {s.overfit_max_loss} within {s.overfit_steps} steps",
        f"loss on a batch of {n} examples after {steps} steps is {final:.4g}"
        + ("" if ok else "; the model cannot memorise a handful of examples: check the loss, the learning rate, "
           "that gradients reach the parameters and that inputs and labels are aligned"))


def check_short_training(factory, data: SanityData, loss_fn, cfg: Config, tracker: _Tracker) -> list[CheckResult]:
    """The same short training on real and on zeroed inputs: the loss falls and real inputs win on val."""
    import torch

    from components.models.tabular import init_output_bias

    s, t = cfg.sanity, cfg.train
    prior = _class_prior(data.y, data.n_classes).float()
    results = {}
    for name, zero in (("real", False), ("zeroed", True)):
        model = factory()
        if hasattr(model, "head"):
            init_output_bias(model, prior)
        xn = torch.zeros_like(data.x_num) if zero else data.x_num
        xc = torch.zeros_like(data.x_cat) if zero else data.x_cat
        before = _eval_loss(model, loss_fn, xn, xc, data.y)
        _train(model, loss_fn, xn, xc, data.y, steps=s.short_train_steps, batch=min(t.batch_size, len(data.y)),
               lr=t.lr, seed=2, tracker=tracker, where=f"short training ({name} inputs)")
        after = _eval_loss(model, loss_fn, xn, xc, data.y)
        vn = torch.zeros_like(data.val_x_num) if zero else data.val_x_num
        vc = torch.zeros_like(data.val_x_cat) if zero else data.val_x_cat
        held = _eval_loss(model, loss_fn, vn, vc, data.val_y) if len(data.val_y) else after
        results[name] = (before, after, held)
    before, after, held = results["real"]
    drop = (before - after) / before if before > 0 and math.isfinite(before) else float("nan")
    decreased = math.isfinite(drop) and drop >= LOSS_DECREASE_MIN
    base = results["zeroed"][2]
    gain = (base - held) / base if base > 0 and math.isfinite(base) and math.isfinite(held) else float("nan")
    beats = math.isfinite(gain) and gain >= s.baseline_min_improvement
    return [
        CheckResult(
            "loss_decreases", decreased, drop, f"relative drop >= {LOSS_DECREASE_MIN}",
            f"sample loss {before:.4f} -> {after:.4f} after {s.short_train_steps} steps (drop {drop:.2%})"
            + ("" if decreased else "; training does not reduce the loss: check the learning rate, the loss and "
               "the optimiser wiring, or, if one batch can be overfit, whether the labels depend on the features")),
        CheckResult(
            "beats_zero_input_baseline", beats, gain, f"relative gain >= {s.baseline_min_improvement}",
            f"held-out loss {held:.4f} on real inputs vs {base:.4f} on zeroed inputs after the same "
            f"{s.short_train_steps} steps (gain {gain:.2%})"
            + ("" if beats else "; the model does no better than one that never sees the input: the features "
               "may not be related to the labels (shuffled or misaligned labels?) or the model ignores them")),
    ]


def check_finite(tracker: _Tracker) -> CheckResult:
    ok = tracker.non_finite == 0
    return CheckResult(
        "finite", ok, float(tracker.non_finite), "0 non-finite steps",
        f"{tracker.non_finite} of {tracker.steps} training steps had a NaN/Inf loss or gradient"
        + ("" if ok else f"; first at {tracker.first_bad}: check for log(0), division by zero or a too-high learning rate"))


def check_model(factory: Callable[[], Any], data: SanityData, cfg: Config, *, loss_fn: LossFn | None = None) -> list[CheckResult]:
    """Run every model check with fresh models from ``factory`` (each seeded) and ``loss_fn``."""
    import torch

    loss_fn = loss_fn or torch.nn.functional.cross_entropy
    tracker = _Tracker()
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


# --- first batch dump ---------------------------------------------------------------------------


def decode_first_batch(batch: FirstBatch, prep: Preprocessing, label: str) -> dict[str, Any]:
    """The exact tensors of the first batch, decoded back to column names and values."""
    n = len(batch.y)
    numeric_cols, cat_cols = list(prep.numeric), list(prep.categorical)
    records = []
    for i in range(n):
        rec: dict[str, Any] = {"numeric": {}, "categorical": {}}
        for k, col in enumerate(numeric_cols):
            z = float(batch.x_num[i, k])
            st = prep.numeric[col]
            rec["numeric"][col] = {"tensor": z, "decoded": z * st["std"] + st["mean"]}
        for k, col in enumerate(cat_cols):
            idx = int(batch.x_cat[i, k])
            vocab = prep.categorical[col]
            rec["categorical"][col] = {"tensor": idx, "decoded": vocab[idx - 1] if 0 < idx <= len(vocab) else "<unseen/missing>"}
        yi = int(batch.y[i])
        rec["label"] = {"tensor": yi, "decoded": prep.classes[yi], "column": label}
        records.append(rec)
    return {
        "drawn": batch.drawn,
        "model_input": "model(x_num, x_cat): x_num standardised with the train mean/std (missing -> 0), "
                       "x_cat vocabulary indices (0 = unseen or missing)",
        "x_num": {"shape": list(batch.x_num.shape), "dtype": str(batch.x_num.dtype), "columns": numeric_cols},
        "x_cat": {"shape": list(batch.x_cat.shape), "dtype": str(batch.x_cat.dtype), "columns": cat_cols},
        "y": {"shape": [n], "dtype": str(batch.y.dtype), "classes": prep.classes},
        "rows": records,
    }


def check_first_batch_roundtrip(dump: dict[str, Any], raw, label: str) -> CheckResult:
    """Decoded tensors match the raw rows (missing numbers decode to the train mean, by design)."""
    mismatches = []
    for i, rec in enumerate(dump["rows"]):
        row = raw.iloc[i]
        for col, v in rec["numeric"].items():
            raw_v = row[col]
            if raw_v is not None and not (isinstance(raw_v, float) and math.isnan(raw_v)):
                if not math.isclose(v["decoded"], float(raw_v), rel_tol=1e-4, abs_tol=1e-3):
                    mismatches.append(f"row {i} {col}: tensor decodes to {v['decoded']:.6g}, raw {raw_v}")
        for col, v in rec["categorical"].items():
            raw_v = row[col]
            if raw_v is not None and str(raw_v) != v["decoded"] and v["decoded"] != "<unseen/missing>":
                mismatches.append(f"row {i} {col}: tensor decodes to {v['decoded']!r}, raw {raw_v!r}")
        if str(row[label]) != rec["label"]["decoded"]:
            mismatches.append(f"row {i} label: tensor decodes to {rec['label']['decoded']!r}, raw {row[label]!r}")
    ok = not mismatches
    return CheckResult(
        "first_batch_roundtrip", ok, float(len(mismatches)), "0 mismatches",
        f"{len(dump['rows'])} first-batch rows decoded back to column values; {len(mismatches)} mismatch(es)"
        + ("" if ok else f": {'; '.join(mismatches[:3])}: the encoding does not match the data"))


# --- report, MLflow and the entry point ----------------------------------------------------------


def render_report(result: SanityResult, cfg: Config, first_batch: dict[str, Any] | None) -> str:
    verdict = "SKIPPED" if result.skipped else ("PASSED" if result.passed else "FAILED")
    lines = [f"# Sanity checks: {verdict}", ""]
    if result.skipped:
        return "\n".join(lines + ["sanity.enabled is false: no check ran."]) + "\n"
    lines += [f"Model `{cfg.model.kind}` (hidden {cfg.model.hidden}, depth {cfg.model.depth}), sample of "
              f"{cfg.sanity.sample_rows} train rows; {result.seconds:.2f} s in all.", "",
              "| check | result | value | threshold | seconds | detail |", "|---|---|---|---|---|---|"]
    for c in result.checks:
        status = "pass" if c.passed else ("**FAIL**" if c.severity == "error" else "warn")
        value = "n/a" if c.value is None else f"{c.value:.4g}"
        lines.append(f"| {c.name} | {status} | {value} | {c.threshold} | {c.seconds:.2f} | {c.message.replace('|', '/')} |")
    if first_batch:
        lines += ["", "## First batch as the model sees it (first 3 rows, decoded)", "",
                  f"Drawn as the trainer draws it: {first_batch['drawn']}. All rows are in the first-batch artifact.",
                  "", "```json"]
        lines += [json.dumps(r) for r in first_batch["rows"][:3]]
        lines += ["```"]
    return "\n".join(lines) + "\n"


def _log_to_mlflow(tracking_uri: str, run_id: str, result: SanityResult, paths: list[str]) -> None:
    if not tracking_uri or not run_id:
        return
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    client = MlflowClient(tracking_uri=tracking_uri)
    now = int(time.time() * 1000)
    metrics = [Metric(f"sanity.{c.name}", float(c.value), now, 0) for c in result.checks
               if c.value is not None and math.isfinite(c.value)]
    # One batched write: each separate log_metric is its own database transaction.
    client.log_batch(run_id, metrics=[*metrics, Metric("sanity.seconds", float(result.seconds), now, 0)])
    client.set_tag(run_id, "ctpipe.sanity", "skipped" if result.skipped else ("passed" if result.passed else "failed"))
    for path in paths:
        if path and Path(path).is_file():
            client.log_artifact(run_id, path, artifact_path="sanity")
    client.log_dict(run_id, result.summary(), "sanity/summary.json")


def _write(path: str, text: str) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def run_sanity_checks(
    snapshot_dir: str, config: Config, *, report_path: str, first_batch_path: str, tracking_uri: str,
    mlflow_run_id: str, model_factory: Callable[[], Any] | None = None, loss_fn: LossFn | None = None,
) -> SanityResult:
    """Run the checks on the configured model (or ``model_factory``) and a sample of the snapshot."""
    started = time.perf_counter()
    if not config.sanity.enabled:
        result = SanityResult(skipped=True)
        _write(report_path, render_report(result, config, None))
        _write(first_batch_path, json.dumps({"skipped": True}))
        _log_to_mlflow(tracking_uri, mlflow_run_id, result, [report_path])
        return result
    import torch

    from components.models.tabular import InputSpec, build_model

    snapshot = load_snapshot(snapshot_dir)
    data = load_sanity_data(snapshot, config)
    prep = snapshot.preprocessing
    spec = InputSpec(n_numeric=len(prep.numeric), cardinalities=prep.cardinalities, n_classes=len(prep.classes))

    def default_factory():
        return build_model(config.model, spec)

    build = model_factory or default_factory

    def seeded_factory():
        torch.manual_seed(config.train.seed)  # every check starts from the same initial weights
        return build()

    dump = decode_first_batch(data.first_batch, prep, snapshot.schema.label)
    _write(first_batch_path, json.dumps(dump, indent=1))
    checks = [check_first_batch_roundtrip(dump, data.first_batch.raw, snapshot.schema.label)]
    # Tiny models: one thread is as fast, and far faster when the CPU is shared (2 threads spin-wait).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        checks += check_model(seeded_factory, data, config, loss_fn=loss_fn)
    finally:
        torch.set_num_threads(threads)
    result = SanityResult(checks=checks, seconds=time.perf_counter() - started)
    _write(report_path, render_report(result, config, dump))
    _log_to_mlflow(tracking_uri, mlflow_run_id, result, [report_path, first_batch_path])
    if not result.passed:
        raise SanityCheckError(failure_message(result, report_path))
    return result


# The most specific diagnosis first: a NaN or a missing gradient also breaks every training-based check.
DIAGNOSIS_ORDER = ("finite", "gradients_flow", "input_dependence", "batch_independence", "first_batch_roundtrip",
                   "init_loss_uniform", "init_loss_prior", "overfit_one_batch", "beats_zero_input_baseline",
                   "loss_decreases")


def failure_message(result: SanityResult, report_path: str) -> str:
    """One paragraph: the most specific failed check in full, then the others by name and figure."""
    rank = {name: i for i, name in enumerate(DIAGNOSIS_ORDER)}
    failed = sorted(result.failures, key=lambda c: rank.get(c.name, len(rank)))
    first = failed[0]
    value = "n/a" if first.value is None else f"{first.value:.4g}"
    text = (f"sanity check '{first.name}' failed before training, so the run stops here: {first.name}: "
            f"{first.message} (value {value}, threshold {first.threshold})")
    if len(failed) > 1:
        others = ", ".join(f"{c.name} ({'n/a' if c.value is None else f'{c.value:.4g}'} vs {c.threshold})"
                           for c in failed[1:])
        text += f". Also failed: {others}"
    return text + f". Full report: {report_path or '(not written)'}."

