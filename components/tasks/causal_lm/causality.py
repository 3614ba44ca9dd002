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
    out, leaves = _sequence_leaves(model, tokens, doc_ids)
    return out, leaves[0]


def _sequence_leaves(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor):
    """The model's output and, as leaves that gradients reach, the output of every ``nn.Embedding`` that maps a
    sequence-aligned input ``[batch, seq]`` to vectors: the token embedding first, then any other (positions
    or segments computed per row from ``doc_ids``), so a leak through an input other than the ids shows too."""
    captured: list[torch.Tensor] = []
    of_tokens: list[bool] = []

    def hook(module, args, output):
        if output.shape[:2] == tokens.shape:
            output = output.detach().requires_grad_(True)
            captured.append(output)
            of_tokens.append(bool(args) and args[0].shape == tokens.shape and bool(torch.equal(args[0], tokens)))
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
    # The embedding of the token ids themselves first (else the first called), whatever order forward() takes.
    first = of_tokens.index(True) if any(of_tokens) else 0
    return out, [captured[first]] + captured[:first] + captured[first + 1 :]


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
    """d output[t] / d embedding[s] is zero for every s > t, for every sequence-aligned embedding (tokens,
    positions or segments), and non-zero at s = t for the token embedding."""
    out, leaves = _sequence_leaves(model, tokens, doc_ids)
    seq = tokens.shape[1]
    future, worst, own_min = 0.0, (0, 0, 0), float("inf")
    for t in _probe_positions(seq):
        grads = torch.autograd.grad(out[:, t].sum(), leaves, retain_graph=True, allow_unused=True)
        for k, grad in enumerate(grads):
            if grad is None:
                continue
            per_pos = grad.abs().amax(dim=(0, 2))  # [seq]
            if k == 0:
                own_min = min(own_min, float(per_pos[t]))
            if t + 1 < seq:
                s = t + 1 + int(per_pos[t + 1 :].argmax())
                if float(per_pos[s]) > future:
                    future, worst = float(per_pos[s]), (t, s, k)
    ok = future <= LEAK_TOL and own_min > LEAK_TOL
    text = f"largest |d output[t] / d input[s]| over s > t is {future:.3g}"
    if future > LEAK_TOL:
        t, s, k = worst
        through = "the token embedding" if k == 0 else f"embedding {k} of the sequence (positions or segments)"
        text += (f" (output at position {t} depends on the input at position {s}, through {through}): the model sees "
                 "FUTURE tokens, so it can read the token it must predict. A missing or wrong causal mask "
                 "(is_causal=True / a lower-triangular mask), an off-by-one in the shift, or positions counted "
                 "from the end of the document; this trains 'beautifully' and is useless")
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


def _changed_doc_ids(doc_ids: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """``doc_ids`` with every id at ``where`` made a new document's (an id no earlier position holds)."""
    fresh = doc_ids.max() + 1 + doc_ids - doc_ids.min()
    return torch.where(where, fresh, doc_ids)


@torch.no_grad()
def check_future_tokens(model: nn.Module, tokens: torch.Tensor, doc_ids: torch.Tensor) -> CheckResult:
    """Outputs before m are unchanged when the ids from m on change, for every split m, in eval and train mode;
    and when the document ids from m on change (a new document starts at m): every sequence-aligned input."""
    generator = torch.Generator().manual_seed(0)
    worst: dict[str, tuple[float, int, int, str]] = {}
    for mode in ("eval", "train"):
        model.train(mode == "train")
        torch.manual_seed(0)  # the same dropout masks in every forward of this mode
        base = model(tokens, doc_ids).float()
        worst[mode] = (0.0, 0, 0, "tokens")
        for m in _split_points(tokens.shape[1]):
            later = torch.zeros_like(tokens, dtype=torch.bool)
            later[:, m:] = True
            for changed, what in (((_changed_ids(tokens, later, generator), doc_ids), "tokens"),
                                  ((tokens, _changed_doc_ids(doc_ids, later)), "document ids")):
                torch.manual_seed(0)
                diff = (model(*changed).float()[:, :m] - base[:, :m]).abs().amax(dim=(0, 2))
                t = int(diff.argmax())
                if float(diff[t]) > worst[mode][0]:
                    worst[mode] = (float(diff[t]), t, m, what)
    model.eval()
    mode = max(worst, key=lambda k: worst[k][0])
    leak, t, m, what = worst[mode]
    ok = leak <= TOKEN_TOL
    text = f"largest change of an output before position m when the tokens or document ids from m on change: {leak:.3g}"
    batch_norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    if not ok and worst["eval"][0] <= TOKEN_TOL and batch_norm:
        text = (f"BatchNorm in train mode mixes positions: the output at position {t} changes when the {what} from "
                f"position {m} on change (by {leak:.3g}) only in TRAIN mode, and the model has a BatchNorm layer, whose "
                "batch statistics are taken over every position of every sequence, future ones included; use "
                "LayerNorm (per position) in a causal model. " + text)
    elif not ok:
        only_train = worst["eval"][0] <= TOKEN_TOL
        text = (f"future {what} leak: the output at position {t} changes when the {what} from position {m} on change "
                f"(by {leak:.3g}, in {mode} mode): the model sees FUTURE "
                + ("tokens" if what == "tokens" else "document ids, so each token learns how many tokens remain in "
                   "its document (positions or segments counted with the wrong triangle)")
                + (" only in TRAIN mode: it is causal when evaluated but reads what it must predict while "
                   "it trains (an attention path or mask taken only when self.training)" if only_train else "")
                + ". Look for a shift of the inputs inside the model, a causal mask wrong at some positions, a "
                "mask missing in one mode, or per-document positions counted from the end; this trains "
                "'beautifully' and is useless")
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
