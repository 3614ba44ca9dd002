"""Selection gate cases: the real config validation, ranking and retention on checkpoint directories.

Each case is a training history (validation metrics per evaluated step, noisy, with its best step
somewhere in the middle) written as complete checkpoint directories with an index. Healthy cases are
consistent settings (``select.metric`` with ``mode`` auto or agreeing, a custom metric with an explicit
mode, ties on the metric); ``blocked`` is "the config was refused, or the selected or retained step is not
the best one". Broken cases are settings that would pick the worst checkpoint and delete the best
(a loss with mode=max, a score with mode=min) or cannot know the direction (an unknown metric, mode
auto); ``blocked`` is "refused as a config error".
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.select_checkpoint.select import select_best_checkpoint


def _history(rng: np.random.Generator, steps: int = 12) -> list[ckpt.IndexEntry]:
    """Loss falls then rises (overfitting) with noise; accuracy mirrors it; a custom score too."""
    t = np.linspace(0, 1, steps)
    loss = 0.9 - 0.6 * t + 0.5 * t**2 + rng.normal(0, 0.01, steps)
    acc = 0.5 + 0.5 * (0.9 - loss) + rng.normal(0, 0.005, steps)
    score = -loss + rng.normal(0, 0.005, steps)
    return [ckpt.IndexEntry(int(s), {"val_loss": float(lo), "val_accuracy": float(a), "val_custom_score": float(c)})
            for s, lo, a, c in zip(range(10, 10 * steps + 1, 10), loss, acc, score, strict=True)]


def _run(root: Path, entries: list[ckpt.IndexEntry], sets: list[str], keep_best: int = 2) -> tuple[int, set[int]]:
    """Retention as the trainer applies it, then selection as the select step does; (selected, on disk)."""
    config = load_config(None, sets)
    for e in entries:
        path = ckpt.checkpoint_path(root, e.step)
        path.mkdir(parents=True)
        (path / ckpt.COMPLETE_MARKER).write_text(str(e.step))
    sel = config.select
    ckpt.apply_retention(root, entries, keep_best=keep_best, metric=sel.metric, mode=sel.direction)
    ckpt.write_index(root, entries, metric=sel.metric, mode=sel.direction, extra={})
    best = select_best_checkpoint(root, sel.metric, sel.direction)
    return best.step, {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(root)}


def _case(name: str, expected_block: bool, root: Path, entries, sets: list[str], truly_best: int | None) -> dict:
    try:
        selected, kept = _run(root, entries, sets)
    except ConfigError as err:
        return {"name": name, "gate": "select", "expected_block": expected_block, "blocked": True,
                "detail": f"config refused: {str(err)[:180]}"}
    wrong = truly_best is not None and (selected != truly_best or truly_best not in kept)
    detail = f"selected step {selected} (best {truly_best}), kept {sorted(kept)}"
    return {"name": name, "gate": "select", "expected_block": expected_block, "blocked": wrong, "detail": detail}


def cases(seed: int) -> list[dict]:
    rng = np.random.default_rng([30, seed])
    out = []
    with tempfile.TemporaryDirectory(prefix="ctpipe-gates-select-") as tmp_dir:
        tmp = Path(tmp_dir)

        def best(entries, metric, higher):
            values = {e.step: e.metrics[metric] for e in entries}
            return (max if higher else min)(values, key=values.get)

        h = _history(rng)
        healthy = [
            ("val_loss, mode auto", ["select.metric=val_loss"], best(h, "val_loss", False)),
            ("val_loss, mode min", ["select.metric=val_loss", "select.mode=min"], best(h, "val_loss", False)),
            ("val_accuracy, mode auto", ["select.metric=val_accuracy"], best(h, "val_accuracy", True)),
            ("custom score, explicit mode max", ["select.metric=val_custom_score", "select.mode=max"],
             best(h, "val_custom_score", True)),
        ]
        for i, (name, sets, truly_best) in enumerate(healthy):
            copy = [ckpt.IndexEntry(e.step, dict(e.metrics)) for e in h]  # retention marks entries as kept
            out.append(_case(name, False, tmp / f"h{i}", copy, sets, truly_best))

        # A tie on accuracy: the lower validation loss wins, wherever it is.
        tie = _history(rng)
        tie[3].metrics["val_accuracy"] = tie[8].metrics["val_accuracy"] = 0.99
        tie[3].metrics["val_loss"], tie[8].metrics["val_loss"] = 0.5, 0.4
        out.append(_case("tie on val_accuracy, broken by val_loss", False, tmp / "tie", tie,
                         ["select.metric=val_accuracy"], tie[8].step))

        broken = [
            ("val_loss with mode=max (would keep the worst)", ["select.metric=val_loss", "select.mode=max"]),
            ("val_accuracy with mode=min", ["select.metric=val_accuracy", "select.mode=min"]),
            ("val_macro_f1 with mode=min", ["select.metric=val_macro_f1", "select.mode=min"]),
            ("unknown metric, mode auto", ["select.metric=val_custom_score"]),
        ]
        for i, (name, sets) in enumerate(broken):
            out.append(_case(name, True, tmp / f"b{i}", _history(rng), sets, None))
    return out
