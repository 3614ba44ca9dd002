"""Probes of the loss alone, before any training: it computes what the task says it computes.

* ``loss_oracle``: a predictor that knows every target (outputs built from the targets: a large logit at the
  right class, or the value itself for real-valued targets) scores near zero, far below a predictor that
  knows nothing (all outputs zero); for sequence targets, a predictor that knows the answer one position
  off scores worse than the right one. A loss that shifts the targets a second time (the task's targets
  already are the next token) scores the right oracle badly and the one-off oracle as perfect.
* ``loss_padding``: padding added to a batch (positions and whole rows whose targets are ignored, -100 as
  torch's ``ignore_index`` and ``causal_lm`` mark them) leaves the loss unchanged; a loss that averages over
  padding changes. It applies to integer targets of sequences (two or more dimensions).

They call the loss on outputs of the model's shape built here, so a bug in the loss is told apart from
one in the model, the data or the training.
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.tasks.protocol import CheckResult

IGNORE_INDEX = -100  # torch's cross_entropy ignore_index: the targets that padding carries
ORACLE_LOGIT = 30.0  # the right class's logit in the oracle's output (the others 0): cross-entropy ~ C·e^-30
ORACLE_MAX_SHARE = 0.01  # the oracle's loss must be under this share of the know-nothing predictor's
PADDING_RTOL = 1e-5


def oracle_outputs(like: Any, targets: Any) -> Any | None:
    """Outputs shaped ``like`` from a predictor that knows ``targets``; None for a layout the probe does not know.

    Class targets (integers, one per output vector): ``ORACLE_LOGIT`` at the right class. Real-valued targets
    of the outputs' size: the targets themselves.
    """
    import torch

    if targets.is_floating_point():
        return targets.reshape(like.shape).to(like.dtype) if targets.numel() == like.numel() else None
    if like.dim() != targets.dim() + 1 or like.shape[:-1] != targets.shape:
        return None
    out = torch.zeros_like(like)
    out.scatter_(-1, targets.clamp(0, like.shape[-1] - 1).unsqueeze(-1), ORACLE_LOGIT)
    return out


def _shifted(targets: Any, by: int) -> Any:
    """The targets one position off along the sequence (dimension 1); the position rolled in is ignored."""
    import torch

    out = torch.roll(targets, -by, dims=1)
    if by > 0:
        out[:, -by:] = IGNORE_INDEX
    else:
        out[:, :-by] = IGNORE_INDEX
    return out


def check_loss_oracle(loss_fn: Any, outputs: Any, targets: Any) -> CheckResult | None:
    """The loss of an oracle is near zero and below the loss of an oracle one position off (sequences)."""
    import torch

    with torch.no_grad():
        oracle = oracle_outputs(outputs.float(), targets)
        if oracle is None:
            return None
        right = float(loss_fn(oracle, targets))
        blind = float(loss_fn(torch.zeros_like(oracle), targets))
        off: dict[str, float] = {}
        if not targets.is_floating_point() and targets.dim() >= 2 and targets.shape[1] > 2:
            for name, by in (("one position later", 1), ("one position earlier", -1)):
                off[name] = float(loss_fn(oracle_outputs(oracle, _shifted(targets, by)), targets))
    bound = ORACLE_MAX_SHARE * blind
    ok = right == right and right <= bound and all(right < value for value in off.values())
    figures = (f"loss of a predictor that knows every target {right:.4g}, of one that knows nothing {blind:.4g}"
               + "".join(f", of one that knows the target {name} {value:.4g}" for name, value in off.items()))
    if ok:
        return CheckResult("loss_oracle", True, right, f"<= {ORACLE_MAX_SHARE:g} x the know-nothing loss", figures)
    best_off = min(off, key=off.get) if off else ""
    if best_off and off[best_off] < right:
        lead = (f"the loss shifts the targets: a predictor that knows the target {best_off} scores {off[best_off]:.4g}, "
                f"better than one that knows the right target ({right:.4g}); the targets are already aligned with the "
                "outputs (for a language model, already the next token), so the loss must not shift them again")
    else:
        lead = (f"the loss does not compute what the task says: a predictor that knows every target scores {right:.4g}, "
                f"not near 0 (<= {bound:.4g}); check the loss's inputs (logits, not probabilities), its target "
                "encoding and its reduction")
    return CheckResult("loss_oracle", False, right, f"<= {ORACLE_MAX_SHARE:g} x the know-nothing loss",
                       f"{lead}; {figures}")


def check_loss_padding(loss_fn: Any, outputs: Any, targets: Any) -> CheckResult | None:
    """Padding (ignored positions at the end of every row, and ignored rows) leaves the loss unchanged."""
    import torch

    if targets.is_floating_point() or targets.dim() < 2:
        return None
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        logits = torch.randn(outputs.shape, generator=gen).to(outputs.dtype)
        base = float(loss_fn(logits, targets))
        pad = max(1, targets.shape[1] // 4)
        extra = torch.randn((*targets.shape[:1], pad, *outputs.shape[2:]), generator=gen).to(outputs.dtype)
        longer = (torch.cat([logits, extra], dim=1),
                  torch.cat([targets, torch.full((targets.shape[0], pad), IGNORE_INDEX, dtype=targets.dtype)], dim=1))
        more_rows = (torch.cat([logits, torch.randn(logits.shape, generator=gen).to(logits.dtype)]),
                     torch.cat([targets, torch.full_like(targets, IGNORE_INDEX)]))
        changes = {f"{pad} padded positions at the end of every row": float(loss_fn(*longer)),
                   f"{len(targets)} padded rows": float(loss_fn(*more_rows))}
    worst = max(changes, key=lambda k: abs(changes[k] - base))
    change = abs(changes[worst] - base) / max(1.0, abs(base))
    ok = change <= PADDING_RTOL
    text = (f"loss {base:.6g} without padding; " + ", ".join(f"{v:.6g} with {k}" for k, v in changes.items())
            + f" (targets {IGNORE_INDEX}, ignored)")
    if not ok:
        text = (f"padding changes the loss: {base:.6g} becomes {changes[worst]:.6g} with {worst}: the loss averages "
                "over padding (a mean over every position, e.g. reduction='none' then .mean(), instead of over the "
                f"targets that are set); average over targets != {IGNORE_INDEX}. " + text)
    return CheckResult("loss_padding", ok, change, f"relative change <= {PADDING_RTOL:g}", text)
