"""Documents packed into fixed-length training sequences, with every token's document recorded.

A document is BOS + bytes + EOS. Documents are laid end to end and cut into rows of ``seq_len + 1``
tokens; a row gives ``inputs = row[:-1]`` and ``targets = row[1:]`` (the next token), so the
targets are the inputs shifted by one. ``doc_ids`` marks which document each input token belongs to
(a model may isolate documents by attending only within one); a target that begins another document
(the next document's BOS) is never predicted across the boundary: it is set to ``IGNORE``. The tail of
the last row is PAD with ``IGNORE`` targets.

``pack_apart`` is for scoring: every document starts a row of its own, so its loss does not depend on
which documents are scored with it (packed end to end, the model attends to the previous document and
the row cuts move with it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ctpipe.components.tasks.causal_lm import tokenizer

IGNORE = -100  # cross_entropy's ignore_index


@dataclass
class Packed:
    """Packed sequences: inputs, next-token targets and each input token's document (-1 for padding)."""

    inputs: torch.Tensor  # [rows, seq_len] int64
    targets: torch.Tensor  # [rows, seq_len] int64, IGNORE where nothing is predicted
    doc_ids: torch.Tensor  # [rows, seq_len] int64, index into the packed documents; -1 on padding

    def __len__(self) -> int:
        return int(self.inputs.shape[0])


def pack_documents(texts: Sequence[str], seq_len: int) -> Packed:
    """``texts`` in order, packed into rows of ``seq_len`` inputs (see the module docstring)."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2, got {seq_len}")
    pieces = [tokenizer.encode(t) for t in texts]
    if not pieces:
        empty = torch.zeros((0, seq_len), dtype=torch.long)
        return Packed(empty, empty.clone(), empty.clone())
    tokens = np.concatenate(pieces)
    docs = np.repeat(np.arange(len(pieces), dtype=np.int64), [len(p) for p in pieces])
    # A target belongs to the input before it; where the next token starts another document, skip it.
    targets = np.append(tokens[1:], tokenizer.PAD)
    same_doc = np.append(docs[1:] == docs[:-1], False)
    targets = np.where(same_doc, targets, IGNORE)
    rows = -(-len(tokens) // seq_len)
    pad = rows * seq_len - len(tokens)
    tokens = np.concatenate([tokens, np.full(pad, tokenizer.PAD)])
    targets = np.concatenate([targets, np.full(pad, IGNORE)])
    docs = np.concatenate([docs, np.full(pad, -1)])
    shape = (rows, seq_len)
    return Packed(
        torch.from_numpy(tokens.reshape(shape).copy()),
        torch.from_numpy(targets.reshape(shape).copy()),
        torch.from_numpy(docs.reshape(shape).copy()),
    )


def pack_apart(texts: Sequence[str], seq_len: int) -> Packed:
    """``texts`` in order, each on rows of its own (no row holds two documents); ``doc_ids`` index ``texts``."""
    if not texts:
        return pack_documents([], seq_len)
    parts = [pack_documents([text], seq_len) for text in texts]
    doc_ids = torch.cat([torch.where(p.doc_ids >= 0, i, -1) for i, p in enumerate(parts)])
    return Packed(torch.cat([p.inputs for p in parts]), torch.cat([p.targets for p in parts]), doc_ids)
