"""Per-document losses and the metrics built from them: validation loss (nats/token) and bits per byte.

A document's row of ``document_losses`` is ``[nll_sum, predicted_tokens, bytes]``: the summed
next-token negative log-likelihood (nats) over its predicted tokens (its bytes and its EOS), and its
UTF-8 length. Each document is scored on rows of its own (``packing.pack_apart``): its row does not
depend on the other documents scored with it, so a served text's loss does not change with the request
and the bootstrap's documents are independent units. Corpus metrics are ratios of sums, so a bootstrap that resamples DOCUMENTS (rows) and
re-sums gives their intervals (``weighted_metrics`` does every resample in one matrix product).
Both are lower-is-better.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn.functional as F

from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.packing import IGNORE, pack_apart

METRICS = ("loss", "bits_per_byte")
NLL, TOKENS, BYTES = 0, 1, 2


def token_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token NLL [batch, seq] in fp32; 0 where the target is IGNORE."""
    flat = F.cross_entropy(
        logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE, reduction="none"
    )
    return flat.view(targets.shape)


def sequence_losses(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Each sequence's mean NLL over its predicted tokens [batch] (0 for a row with none)."""
    counts = (targets != IGNORE).sum(dim=1).clamp_min(1)
    return token_losses(logits, targets).sum(dim=1) / counts


@torch.no_grad()
def document_losses(
    model: torch.nn.Module,
    texts: Sequence[str],
    *,
    seq_len: int,
    batch_size: int = 32,
    device: torch.device | None = None,
    autocast: Callable = nullcontext,
) -> np.ndarray:
    """[documents, 3]: each text's summed NLL, predicted tokens and bytes (see the module docstring)."""
    device = device or torch.device("cpu")
    packed = pack_apart(texts, seq_len)
    nll = torch.zeros(len(texts), dtype=torch.float64)
    counts = torch.zeros(len(texts), dtype=torch.float64)
    was_training = model.training
    model.eval()
    for start in range(0, len(packed), batch_size):
        x = packed.inputs[start : start + batch_size].to(device)
        y = packed.targets[start : start + batch_size].to(device)
        docs = packed.doc_ids[start : start + batch_size]
        with autocast():
            logits = model(x, docs.to(device))
        losses = token_losses(logits, y).double().cpu()
        valid = (y != IGNORE).cpu()
        nll.index_add_(0, docs[valid], losses[valid])
        counts.index_add_(0, docs[valid], torch.ones_like(losses[valid]))
    model.train(was_training)
    n_bytes = np.array([tokenizer.byte_length(t) for t in texts], dtype=np.float64)
    return np.column_stack([nll.numpy(), counts.numpy(), n_bytes])


def weighted_metrics(weights: np.ndarray, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric for each row of ``weights`` [resamples, documents] (how often each document is drawn)."""
    sums = weights @ rows
    with np.errstate(invalid="ignore", divide="ignore"):
        return {
            "loss": sums[:, NLL] / sums[:, TOKENS],
            "bits_per_byte": sums[:, NLL] / math.log(2) / sums[:, BYTES],
        }


def unit_sums(rows: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each metric as per-document (numerator, denominator): the metric is sum(numerator) / sum(denominator), so
    the blessing can judge a paired difference by sign flips of documents (``metrics.sign_flip_interval``)."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, 3)
    return {"loss": (rows[:, NLL], rows[:, TOKENS]), "bits_per_byte": (rows[:, NLL] / math.log(2), rows[:, BYTES])}


def corpus_metrics(rows: np.ndarray) -> dict[str, float]:
    """The metrics over all documents of ``document_losses`` rows."""
    if len(rows) == 0:
        return {m: float("nan") for m in METRICS}
    return {k: float(v[0]) for k, v in weighted_metrics(np.ones((1, len(rows))), rows).items()}


def unigram_rows(train_texts: Sequence[str], texts: Sequence[str]) -> np.ndarray:
    """``document_losses`` rows of the unigram baseline: each token at its train-split frequency (add-one)."""
    counts = np.ones(tokenizer.VOCAB_SIZE)
    for t in train_texts:
        counts += np.bincount(tokenizer.encode(t, bos=False), minlength=tokenizer.VOCAB_SIZE)
    counts[[tokenizer.BOS, tokenizer.PAD]] = 0  # never a target
    logp = np.log(counts / counts.sum(), where=counts > 0, out=np.full(len(counts), -np.inf))
    rows = []
    for t in texts:
        targets = tokenizer.encode(t, bos=False)
        rows.append([-logp[targets].sum(), len(targets), tokenizer.byte_length(t)])
    return np.array(rows, dtype=np.float64).reshape(-1, 3)
