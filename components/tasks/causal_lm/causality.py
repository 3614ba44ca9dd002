"""The sequence checks of the sanity gate: the model is causal, targets are the next token, rows are apart.

The seeds' worst silent bug is an autoregressive model that sees the token it must predict (a missing or
wrong mask, an off-by-one in the shift): it trains "beautifully" and is useless. These checks catch it
on a small packed batch, before training:

* ``next_token_targets``: wherever a target is set, it is the next input token (targets = inputs shifted
  by one); targets equal to the inputs themselves, or to the previous token, are named as such;
* ``causal_gradient``: the gradient of the output at position t with respect to the input embeddings
  at positions s > t is zero (and at s = t it is not: the model reads its input);
* ``future_tokens``: changing the token ids from position m on never changes an output before m, for
  every split m (up to MAX_SPLITS), in eval AND train mode. The gradient probe above cannot see a leak
  before the embedding (a shift of the ids inside the model), a leak at a position it does not probe,
  or one only in train mode (it runs in eval mode): each trains "beautifully" and each was missed;
* ``document_isolation`` (only for a model that claims ``isolates_documents``): no gradient from a
  position to earlier positions of another packed document, and no output of a document changes when
  every token of the row's other documents does, in eval AND train mode (a mask passed only when
  evaluating passed the gradient probe);
* ``sequence_independence``: no gradient from one row (sequence) of the batch to another.

Gradients are taken at the output of the token embedding (the first ``nn.Embedding`` whose output has
the tokens' shape), so they work for integer inputs.
"""

from __future__ import annotations

import torch
from torch import nn

from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.packing import IGNORE
from ctpipe.components.tasks.protocol import CheckResult

LEAK_TOL = 1e-7
POSITIONS = 12  # output positions probed (spread over the sequence, the last one included)
MAX_SPLITS = 64  # split points of future_tokens: every one up to a context of 65 tokens, spread beyond
TOKEN_TOL = 1e-5  # a causal model's earlier logits are bit-identical; allow kernel rounding only


def _embedding_grads(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor):
    """The model's output and the token embeddings' output (a leaf that gradients reach)."""
    captured: list[torch.Tensor] = []

    def hook(module, args, output):
        if output.shape[:2] == tokens.shape and not captured:
            output = output.detach().requires_grad_(True)
            captured.append(output)
            return output
        return None

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Embedding)]
    try:
        torch.manual_seed(0)
        out = model(tokens, doc_ids).float()
    finally:
        for h in handles:
            h.remove()
    if not captured:
        raise ValueError("no nn.Embedding in the model maps the tokens [batch, seq] to vectors: the causality "
                         "checks need the token embedding's output to take gradients at")
    return out, captured[0]


def _probe_positions(seq: int) -> list[int]:
    return sorted({int(round(i * (seq - 1) / max(POSITIONS - 1, 1))) for i in range(POSITIONS)})


def check_next_token_targets(inputs: torch.Tensor, targets: torch.Tensor) -> CheckResult:
    """Where a target is set (not IGNORE) and the next input is in the row, target[t] == input[t + 1]."""
    set_ = targets[:, :-1] != IGNORE
    n = int(set_.sum())
    nxt = float((targets[:, :-1] == inputs[:, 1:])[set_].float().mean()) if n else 0.0
    same = float((targets[:, :-1] == inputs[:, :-1])[set_].float().mean()) if n else 0.0
    prev = float((targets[:, 1:-1] == inputs[:, :-2])[set_[:, 1:]].float().mean()) if n else 0.0
    ok = n > 0 and nxt == 1.0
    text = f"{nxt:.1%} of {n} set targets are the next input token"
    if n == 0:
        text += "; no target is set: every target is ignored, nothing would be learned"
    elif not ok and same > 0.5:
        text += (f"; {same:.1%} equal the input at the SAME position: the targets are not shifted, the model "
                 "would be trained to copy the token it already sees. Use targets = tokens[1:], inputs = tokens[:-1]")
    elif not ok and prev > 0.5:
        text += (f"; {prev:.1%} equal the PREVIOUS input token: the targets are shifted the wrong way "
                 "(targets = tokens[:-1] for inputs = tokens[1:]); the model would predict the past")
    elif not ok:
        text += "; the targets are not the next token: check how encode() builds inputs and targets"
    return CheckResult("next_token_targets", ok, nxt, "== 100% of set targets", text)


def check_causal_gradient(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> CheckResult:
    """d output[t] / d embedding[s] is zero for every s > t, and non-zero at s = t."""
    out, emb = _embedding_grads(model, tokens, doc_ids)
    seq = tokens.shape[1]
    future, worst, own_min = 0.0, (0, 0), float("inf")
    for t in _probe_positions(seq):
        (grad,) = torch.autograd.grad(out[:, t].sum(), emb, retain_graph=True)
        per_pos = grad.abs().amax(dim=(0, 2))  # [seq]
        own_min = min(own_min, float(per_pos[t]))
        if t + 1 < seq:
            s = t + 1 + int(per_pos[t + 1 :].argmax())
            if float(per_pos[s]) > future:
                future, worst = float(per_pos[s]), (t, s)
    ok = future <= LEAK_TOL and own_min > LEAK_TOL
    text = f"largest |d output[t] / d input[s]| over s > t is {future:.3g}"
    if future > LEAK_TOL:
        t, s = worst
        text += (f" (output at position {t} depends on the input at position {s}): the model sees FUTURE tokens, "
                 "so it can read the token it must predict. A missing or wrong causal mask (is_causal=True / a "
                 "lower-triangular mask) or an off-by-one in the shift; this trains 'beautifully' and is useless")
    elif own_min <= LEAK_TOL:
        text += "; the output at a position does not depend on the input at that position: the model ignores its input"
    return CheckResult("causal_gradient", ok, future, f"<= {LEAK_TOL:g} for s > t", text)


def _split_points(seq: int) -> list[int]:
    if seq - 1 <= MAX_SPLITS:
        return list(range(1, seq))
    return sorted({1 + int(round(i * (seq - 2) / (MAX_SPLITS - 1))) for i in range(MAX_SPLITS)})


def _changed_ids(tokens: torch.Tensor, where: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``tokens`` with every id at ``where`` made another byte (a special token becomes a byte)."""
    shift = torch.randint(1, tokenizer.BYTE_TOKENS, tokens.shape, generator=generator)
    return torch.where(where, (tokens + shift) % tokenizer.BYTE_TOKENS, tokens)


@torch.no_grad()
def check_future_tokens(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> CheckResult:
    """Outputs before m are unchanged when the ids from m on change, for every split m, in eval and train mode."""
    generator = torch.Generator().manual_seed(0)
    worst: dict[str, tuple[float, int, int]] = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        torch.manual_seed(0)  # the same dropout masks in every forward of this mode
        base = model(tokens, doc_ids).float()
        worst[mode] = (0.0, 0, 0)
        for m in _split_points(tokens.shape[1]):
            later = torch.zeros_like(tokens, dtype=torch.bool)
            later[:, m:] = True
            changed = _changed_ids(tokens, later, generator)
            torch.manual_seed(0)
            diff = (model(changed, doc_ids).float()[:, :m] - base[:, :m]).abs().amax(dim=(0, 2))
            t = int(diff.argmax())
            if float(diff[t]) > worst[mode][0]:
                worst[mode] = (float(diff[t]), t, m)
    model.eval()
    mode = max(worst, key=lambda k: worst[k][0])
    leak, t, m = worst[mode]
    ok = leak <= TOKEN_TOL
    text = f"largest change of an output before position m when the tokens from m on change: {leak:.3g}"
    if not ok:
        only_train = worst["eval"][0] <= TOKEN_TOL
        text += (f" (in {mode} mode, the output at position {t} changes when the tokens from position {m} on "
                 "change): the model sees FUTURE tokens"
                 + (" only in TRAIN mode: it is causal when evaluated but reads what it must predict while "
                    "it trains (an attention path or mask taken only when self.training)" if only_train else "")
                 + ". Look for a shift of the token ids inside the model, a causal mask wrong at some "
                 "positions, or a mask missing in one mode; this trains 'beautifully' and is useless")
    return CheckResult("future_tokens", ok, leak, f"<= {TOKEN_TOL:g} for every split, eval and train mode", text)


@torch.no_grad()
def _other_document_changes(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> dict[str, tuple]:
    """Per mode, the largest change of a document's outputs when every token of the other documents of its
    row changes: ``(change, row, position, document)``. One forward per document of a row covers all its
    positions (the gradient probe covers POSITIONS of them, in eval mode only)."""
    generator = torch.Generator().manual_seed(1)
    worst: dict[str, tuple] = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        torch.manual_seed(0)  # the same dropout masks in every forward of this mode
        base = model(tokens, doc_ids).float()
        worst[mode] = (0.0, 0, 0, 0)
        for row in range(tokens.shape[0]):
            for d in sorted(set(doc_ids[row].tolist()) - {-1}):
                others = torch.zeros_like(tokens, dtype=torch.bool)
                others[row] = doc_ids[row] != d
                torch.manual_seed(0)
                diff = (model(_changed_ids(tokens, others, generator), doc_ids).float()[row] - base[row]).abs()
                diff = torch.where(doc_ids[row] == d, diff.amax(dim=1), torch.zeros(()))
                t = int(diff.argmax())
                if float(diff[t]) > worst[mode][0]:
                    worst[mode] = (float(diff[t]), row, t, d)
    model.eval()
    return worst


def check_document_isolation(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> CheckResult | None:
    """For a model that claims ``isolates_documents``: no gradient to earlier positions of another document
    (eval mode), and no output of a document changes when the other documents' tokens do (eval and train mode)."""
    if not getattr(model, "isolates_documents", False):
        return None
    out, emb = _embedding_grads(model, tokens, doc_ids)
    leak, where = 0.0, (0, 0, 0)
    for t in _probe_positions(tokens.shape[1]):
        (grad,) = torch.autograd.grad(out[:, t].sum(), emb, retain_graph=True)
        per = grad.abs().amax(dim=2)  # [batch, seq]
        other = doc_ids != doc_ids[:, t : t + 1]
        masked = torch.where(other, per, torch.zeros_like(per))
        value = float(masked.max())
        if value > leak:
            flat = int(masked.argmax())
            leak, where = value, (flat // per.shape[1], t, flat % per.shape[1])
    changes = _other_document_changes(model, tokens, doc_ids)
    mode = max(changes, key=lambda k: changes[k][0])
    change, c_row, c_t, c_doc = changes[mode]
    ok = leak <= LEAK_TOL and change <= TOKEN_TOL
    text = (f"largest gradient from a position to another packed document's inputs is {leak:.3g}; largest "
            f"change of a document's outputs when the other documents' tokens change is {change:.3g}")
    if not ok:
        if leak > LEAK_TOL:
            row, t, s = where
            text += f" (row {row}: position {t} depends on position {s} of another document)"
        else:
            only_train = changes["eval"][0] <= TOKEN_TOL
            text += (f" (in {mode} mode, row {c_row}: the output at position {c_t}, document {c_doc}, changes with "
                     "another document's tokens)" + (", only in TRAIN mode: the documents are isolated when the "
                                                    "model is evaluated, not while it trains" if only_train else ""))
        text += ("; attention crosses packed documents although the model claims to isolate them "
                 "(isolates_documents=True); mask attention by document (doc_ids) in every mode or drop the claim")
    return CheckResult("document_isolation", ok, max(leak, change), f"<= {LEAK_TOL:g} (gradient), "
                       f"<= {TOKEN_TOL:g} (tokens, eval and train mode)", text)


def check_sequence_independence(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> CheckResult:
    """No row's output depends on another row's inputs (gradient through the token embeddings)."""
    out, emb = _embedding_grads(model, tokens, doc_ids)
    leak, where = 0.0, (0, 0)
    for i in range(tokens.shape[0]):
        (grad,) = torch.autograd.grad(out[i].sum(), emb, retain_graph=True)
        per_row = grad.abs().amax(dim=(1, 2))
        per_row[i] = 0.0
        j = int(per_row.argmax())
        if float(per_row[j]) > leak:
            leak, where = float(per_row[j]), (i, j)
    ok = leak <= LEAK_TOL
    text = f"largest |d output[row i] / d input[row j]| over j != i is {leak:.3g}"
    if not ok:
        text += (f" (row {where[0]} depends on row {where[1]}): sequences of a batch mix (a batch-wide norm or "
                 "attention over the batch dimension; check reshapes and transposes)")
    return CheckResult("sequence_independence", ok, leak, f"<= {LEAK_TOL:g}", text)


def sequence_checks(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor, doc_ids: torch.Tensor) -> list[CheckResult]:
    """Every check of this module on one packed batch, in eval mode (no dropout noise); ``future_tokens``
    also in train mode, with the same dropout masks for the batches it compares."""
    model.eval()
    results = [check_next_token_targets(tokens, targets), check_causal_gradient(model, tokens, doc_ids),
               check_future_tokens(model, tokens, doc_ids)]
    isolation = check_document_isolation(model, tokens, doc_ids)
    if isolation is not None:
        results.append(isolation)
    results.append(check_sequence_independence(model, tokens, doc_ids))
    return results
