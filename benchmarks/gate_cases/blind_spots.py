"""Gate cases for issue 34: the classes of bug that held-out models slipped past the gates, written from the issue.

Sanity (``run_sanity_checks``; ``blocked`` is "SanityCheckError"):
* tabular: the demo data with its labels permuted (no signal: stopped, not warned); dropout left on at evaluation;
* causal_lm on the demo text, the real model healthy; broken: a missing causal mask behind zero-initialised
  attention projections (shows after the warm-up steps), positions counted from the end of each document
  (a leak through ``doc_ids``), a segment embedding of the next position (a leak only a gradient at that
  embedding shows), a loss that shifts the targets again or the other way, a loss that averages over padding.
Validation (``validate_data``; "DataValidationError"): the label copied into a feature on one day of four.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from gate_cases.sanity import KEY, _snapshot, _spec

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import DataValidationError, SanityCheckError
from ctpipe.components.lib.models.tabular import build_model
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.components.tasks.causal_lm import CausalLM
from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data
from ctpipe.pipelines.local.train_alone import build_snapshot
from ctpipe.testing import sequence_bugs
from ctpipe.testing.bugs import DropoutAtEvaluation

CLASS_CODES = {"churn": 0, "downgrade": 1, "stay": 2, "upgrade": 3}


def _gate(snapshot: Path, cfg, out: Path, **kwargs) -> tuple[bool, str]:
    try:
        result = run_sanity_checks(str(snapshot), cfg, report_path=str(out / "sanity.md"),
                                   first_batch_path=str(out / "first_batch.json"), tracking_uri="", mlflow_run_id="",
                                   **kwargs)
    except SanityCheckError as err:
        text = str(err).split(" failed before training", 1)
        return True, text[0].removeprefix("sanity check ") + ": " + text[1].split(": ", 2)[-1][:160]
    warned = [c.name for c in result.checks if not c.passed]
    return False, f"passed in {result.seconds:.1f} s" + (f"; warnings: {', '.join(warned)}" if warned else "")


def _case(name: str, gate: str, broken: bool, outcome: tuple[bool, str]) -> dict:
    return {"name": name, "gate": gate, "expected_block": broken, "blocked": outcome[0], "detail": outcome[1]}


def _shuffled_demo(root: Path, seed: int) -> Path:
    data, snap = root / "shuffled" / "data", root / "shuffled" / "snapshot"
    write_demo_data(data, days=7, rows_per_day=1000, seed=seed)
    rng = np.random.default_rng(seed + 7)
    for part in sorted(data.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        frame["label"] = rng.permutation(frame["label"].to_numpy())
        frame.to_parquet(part, index=False)
    validate_data(str(data), Config.from_dict({"data": {"key": KEY}}), snapshot_dir=str(snap), data_docs_path="",
                  report_path="", tracking_uri="", mlflow_run_id="")
    return snap


def _tabular(root: Path, seed: int) -> list[dict]:
    cfg = Config.from_dict({"data": {"key": KEY}, "train": {"seed": 1000 + seed}})
    demo = _snapshot(root, "demo", seed)
    spec = _spec(demo)
    return [
        _case("demo data with shuffled labels (no signal)", "sanity", True,
              _gate(_shuffled_demo(root, seed), cfg, root / "out-shuffled")),
        _case("dropout left on at evaluation", "sanity", True,
              _gate(demo, cfg, root / "out-dropout",
                    model_factory=lambda: DropoutAtEvaluation(build_model(cfg.model, spec)))),
    ]


# CI's check (``gates.py --ci``): one case of each class, on one day of text, a smaller decoder and a shorter
# sample and training (the benchmark runs every case at the demo settings; ~10x the time).
CI_LM_SETTINGS = ("sanity.sample_rows=16", "sanity.short_train_steps=10")
CI_LM_SHAPE = {"seq_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2}
# Of two cases of one class, CI keeps the first: doc_ids probe (positions) over gradient probe (segments) for a
# leak through another input, the loss shifting again over the other way for the oracle.
CI_SKIPS = ("causal LM, segment embedding of the next position", "causal LM, the loss shifts the targets the other way")


def _language_model(root: Path, seed: int, ci: bool = False) -> list[dict]:
    lm = CausalLM(**CI_LM_SHAPE) if ci else CausalLM()  # the implementation: its demo settings and decoder shape
    options = [f"task.options.{k}={v}" for k, v in CI_LM_SHAPE.items()] if ci else []
    settings = ["task.name=causal_lm", *lm.demo_settings, f"train.seed={1000 + seed}", *options,
                *(CI_LM_SETTINGS if ci else ())]
    cfg = load_config(None, settings)
    write_text_demo_data(root / "text", days=1 if ci else 2)
    snapshot = build_snapshot(str(root / "text"), cfg, root / "text-snapshot").root
    model_cfg = lm.model_config
    models: dict[str, Callable | None] = {
        "causal LM, the real model": None,
        "causal LM, no causal mask behind zero-initialised attention projections":
            lambda: sequence_bugs.zero_projection_without_mask(model_cfg),
        "causal LM, positions counted from the end of each document":
            lambda: sequence_bugs.RemainingTokensPositions(model_cfg),
        "causal LM, segment embedding of the next position": lambda: sequence_bugs.NextSegmentEmbedding(model_cfg),
    }
    losses = {"causal LM, the loss shifts the targets again": sequence_bugs.shifts_targets_again,
              "causal LM, the loss shifts the targets the other way": sequence_bugs.shifts_targets_back,
              "causal LM, the loss averages over padding": sequence_bugs.averages_over_padding}
    runs = [(name, factory is not None, {"model_factory": factory}) for name, factory in models.items()]
    runs += [(name, True, {"loss_fn": loss}) for name, loss in losses.items()]
    return [_case(name, "sanity", broken, _gate(snapshot, cfg, root / f"out-lm-{i}", **kwargs))
            for i, (name, broken, kwargs) in enumerate(runs) if not (ci and name in CI_SKIPS)]


def _leak_on_one_day(root: Path, seed: int) -> dict:
    data = root / "leak-one-day"
    write_demo_data(data, days=4, rows_per_day=1000, seed=seed)
    part = sorted(data.glob("date=*/part-0.parquet"))[1]
    frame = pd.read_parquet(part)
    frame["monthly_spend"] = frame["label"].map(CLASS_CODES).astype("float64") * 40.0 + 20.0
    frame.to_parquet(part, index=False)
    try:
        validate_data(str(data), Config.from_dict({"data": {"key": KEY}}), snapshot_dir=str(root / "leak-snap"),
                      data_docs_path="", report_path="", tracking_uri="", mlflow_run_id="")
    except DataValidationError as err:
        return _case("label copied into a feature on one day of four", "validation", True,
                     (True, str(err).split(": (1) ", 1)[-1][:180]))
    return _case("label copied into a feature on one day of four", "validation", True, (False, "passed"))


def cases(seed: int, ci: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="ctpipe-gates-blind-spots-") as tmp:
        root = Path(tmp)
        return [*_tabular(root, seed), *_language_model(root, seed, ci), _leak_on_one_day(root, seed)]


def ci_cases(seed: int) -> list[dict]:
    """One case of each class at the smaller settings (``CI_LM_SETTINGS``): what ``gates.py --ci`` runs."""
    return cases(seed, ci=True)
