"""Sanity gate cases: healthy data and models of several kinds, and the model and trainer bugs of issue 10.

Each case builds a snapshot with the pipeline's own ``validate_data`` and runs ``run_sanity_checks`` with the
default config (the configured MLP unless a case brings its own model); ``blocked`` is "SanityCheckError".
Healthy: the demo data (MLP and transformer), a weak signal (best possible gain ~1%), rare positives (0.6%),
each of the last two with two data seeds, a BatchNorm model and a zero-initialised adapter and head, and
the MLP trained in bf16 (as the trainer computes on a GPU).
Broken: a row leaking into the others (x + x[:1]; x + roll(x, 8), which only a
batch of more than 8 rows shows; x[:1] in train mode beside a BatchNorm), inputs scaled by the batch size,
rows mixing only in train mode, a detached body, a model whose only trainable parameter is the head bias on
rare-positive data (memorises a one-class batch), a first layer that loses its inputs in bf16
when the trainer computes in bf16, the trainer's schedule stuck at learning rate 0 and
its clipping zeroing every gradient (bugs in the step that sanity now shares), plus the older corpus
(batch mean, softmax twice, NaN loss, clamped loss, input ignored).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from torch import nn

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.encoding import Preprocessing
from ctpipe.components.lib.data.simulate import rare_positive_day, weak_signal_day, write_partitions
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.lib.models.tabular import InputSpec, build_model
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.testing.bugs import (
    AddsFirstRow,
    BatchMean,
    BatchNormAndFirstRowInTrainMode,
    DetachedBody,
    IgnoresInput,
    LeaksBeyondEightRows,
    LosesInputsInBf16,
    MixesRowsInTrainMode,
    ReturnsProbabilities,
    ScaledByBatchSize,
    clipped_loss,
    nan_loss,
    only_the_bias_trains,
    zeroing_clip,
)

KEY = "customer_id"


# --- healthy models that look odd at init or in train mode ----------------------------------------------


class WithBatchNorm(nn.Module):
    """BatchNorm on the inputs: mixes rows in train mode by design (batch statistics), never in eval mode."""

    def __init__(self, inner: nn.Module, n_numeric: int) -> None:
        super().__init__()
        self.inner, self.head, self.norm = inner, inner.head, nn.BatchNorm1d(n_numeric)

    def forward(self, x_num, x_cat):
        return self.inner(self.norm(x_num), x_cat)


class ZeroInitialisedAdapter(nn.Module):
    """A LoRA-style adapter (B = 0) and a zero-initialised head: parts of it get a gradient only after a step."""

    def __init__(self, inner: nn.Module, n_numeric: int) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head
        self.lora_a = nn.Linear(n_numeric, 4, bias=False)
        self.lora_b = nn.Linear(4, n_numeric, bias=False)
        nn.init.zeros_(self.lora_b.weight)
        nn.init.zeros_(self.head.weight)

    def forward(self, x_num, x_cat):
        return self.inner(x_num + self.lora_b(self.lora_a(x_num)), x_cat)


# --- the bugs --------------------------------------------------------------------------------------


@contextmanager
def patched(module: Any, name: str, value: Any):
    """A bug in the trainer's code for the length of one case."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


# --- running a case --------------------------------------------------------------------------------


def _snapshot(root: Path, kind: str, seed: int) -> Path:
    data, snap = root / f"{kind}-{seed}" / "data", root / f"{kind}-{seed}" / "snapshot"
    if snap.is_dir():
        return snap
    if kind == "demo":
        write_demo_data(data, days=7, rows_per_day=1000, seed=seed)
    else:
        day = weak_signal_day if kind == "weak_signal" else rare_positive_day
        write_partitions(data, day, days=7, rows_per_day=3000, seed=seed)
    validate_data(str(data), Config.from_dict({"data": {"key": KEY}}), snapshot_dir=str(snap), data_docs_path="",
                  report_path="", tracking_uri="", mlflow_run_id="")
    return snap


def _spec(snap: Path) -> InputSpec:
    prep = Preprocessing.from_dict(load_snapshot(snap).state)
    return InputSpec(len(prep.numeric), prep.cardinalities, len(prep.classes))


def _case(root: Path, name: str, kind: str, seed: int, *, broken: bool, model: Callable | None = None,
          loss_fn: Callable | None = None, bug=nullcontext, overrides: dict | None = None) -> dict:
    snap = _snapshot(root, kind, seed)
    cfg = Config.from_dict({"data": {"key": KEY}, "train": {"seed": 1000 + seed}, **(overrides or {})})
    spec = _spec(snap)
    factory = (lambda: model(spec, cfg)) if model else None
    out = root / "out" / name.replace(" ", "_")
    try:
        with bug():
            result = run_sanity_checks(str(snap), cfg, report_path=str(out / "sanity.md"),
                                       first_batch_path=str(out / "first_batch.json"), tracking_uri="",
                                       mlflow_run_id="", model_factory=factory, loss_fn=loss_fn)
        warned = [c.name for c in result.checks if not c.passed]
        blocked, detail = False, f"passed in {result.seconds:.1f} s" + (f"; warnings: {', '.join(warned)}" if warned else "")
    except SanityCheckError as err:
        text = str(err).split(" failed before training", 1)
        blocked, detail = True, text[0].removeprefix("sanity check ") + ": " + text[1].split(": ", 2)[-1][:160]
    return {"name": name, "gate": "sanity", "expected_block": broken, "blocked": blocked, "detail": detail}


def cases(seed: int) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="ctpipe-gates-sanity-") as tmp:
        root = Path(tmp)
        mlp = {"model": {"kind": "mlp"}}
        from ctpipe.components.engine import schedule, step

        found = [
            _case(root, "demo data, MLP", "demo", seed, broken=False),
            _case(root, "demo data, transformer", "demo", seed, broken=False,
                  overrides={"model": {"kind": "transformer", "hidden": 64, "depth": 2}}),
        ]
        found += [
            _case(root, "demo data, BatchNorm on the inputs", "demo", seed, broken=False,
                  model=lambda spec, cfg: WithBatchNorm(build_model(cfg.model, spec), spec.n_numeric)),
            _case(root, "demo data, zero-initialised adapter and head", "demo", seed, broken=False,
                  model=lambda spec, cfg: ZeroInitialisedAdapter(build_model(cfg.model, spec), spec.n_numeric)),
        ]
        bf16 = {"train": {"seed": 1000 + seed, "mixed_precision": "bf16"}}
        found.append(_case(root, "demo data, MLP, trained in bf16", "demo", seed, broken=False, overrides=bf16))
        for s in (seed, seed + 1):
            found.append(_case(root, f"weak signal (best gain ~1%), data seed {s}", "weak_signal", s, broken=False))
            found.append(_case(root, f"rare positives (0.6%), data seed {s}", "rare_positive", s, broken=False))
        found += [
            _case(root, "x + x[:1] (a row leaks into every other)", "demo", seed, broken=True,
                  model=lambda spec, cfg: AddsFirstRow(build_model(cfg.model, spec))),
            _case(root, "x + roll(x, 8) (a leak only a batch of more than 8 rows shows)", "demo", seed, broken=True,
                  model=lambda spec, cfg: LeaksBeyondEightRows(build_model(cfg.model, spec))),
            _case(root, "inputs scaled by the batch size", "demo", seed, broken=True,
                  model=lambda spec, cfg: ScaledByBatchSize(build_model(cfg.model, spec))),
            _case(root, "BatchNorm and x + x[:1] in train mode", "demo", seed, broken=True,
                  model=lambda spec, cfg: BatchNormAndFirstRowInTrainMode(build_model(cfg.model, spec), spec.n_numeric)),
            _case(root, "rows mix in train mode only", "demo", seed, broken=True,
                  model=lambda spec, cfg: MixesRowsInTrainMode(build_model(cfg.model, spec))),
            _case(root, "batch mean in eval mode", "demo", seed, broken=True,
                  model=lambda spec, cfg: BatchMean(build_model(cfg.model, spec))),
            _case(root, "detached body (only the head trains)", "demo", seed, broken=True, overrides=mlp,
                  model=lambda spec, cfg: DetachedBody(build_model(cfg.model, spec))),
            _case(root, "only the head bias trains, rare positives", "rare_positive", seed, broken=True,
                  model=lambda spec, cfg: only_the_bias_trains(build_model(cfg.model, spec))),
            _case(root, "inputs rounded away in bf16 (a large offset before the first matmul), trainer in bf16", "demo",
                  seed, broken=True, overrides=bf16, model=lambda spec, cfg: LosesInputsInBf16(build_model(cfg.model, spec))),
            _case(root, "trainer schedule stuck at learning rate 0", "demo", seed, broken=True,
                  bug=lambda: patched(schedule, "lr_multiplier", lambda step, **_: 0.0)),
            _case(root, "trainer clipping zeroes the gradients", "demo", seed, broken=True,
                  bug=lambda: patched(step, "clip_grad_norm_", zeroing_clip)),
            _case(root, "softmax applied twice", "demo", seed, broken=True,
                  model=lambda spec, cfg: ReturnsProbabilities(build_model(cfg.model, spec))),
            _case(root, "output ignores the input", "demo", seed, broken=True,
                  model=lambda spec, cfg: IgnoresInput(spec.n_classes)),
            _case(root, "loss clamped instead of gradients clipped", "demo", seed, broken=True,
                  loss_fn=clipped_loss),
            _case(root, "NaN loss", "demo", seed, broken=True,
                  loss_fn=nan_loss),
        ]
        return found
