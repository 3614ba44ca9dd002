"""Language-model bugs that held-out models slipped past the sanity gate (issue 34), written from their descriptions.

Shared by the tests (tests/components/tasks/causal_lm/test_lm_blind_spots.py) and the gate benchmark
(``benchmarks/gate_cases/blind_spots.py``); nothing in a run imports them. Each model is ``causal_lm``'s GPT
with one thing wrong; each loss is the task's cross-entropy with one thing wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ctpipe.components.tasks.causal_lm.model import GPT, CausalSelfAttention
from ctpipe.components.tasks.causal_lm.packing import IGNORE
from ctpipe.components.tasks.causal_lm.sizes import LMConfig


class _NoMaskAttention(CausalSelfAttention):
    """Full (bidirectional) attention: no causal mask."""

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c))


def zero_projection_without_mask(cfg: LMConfig) -> GPT:
    """No causal mask, hidden at init by attention output projections initialised to zero: every leaking path
    is multiplied by zero on the fresh model and opens once the projection moves."""
    model = GPT(cfg)
    for block in model.blocks:
        block.attn.__class__ = _NoMaskAttention
        nn.init.zeros_(block.attn.proj.weight)
    return model


class RemainingTokensPositions(GPT):
    """Per-document positions counted with the wrong triangle (s >= t instead of s <= t): each token's position
    embedding says how many tokens remain in its document."""

    def forward(self, tokens, doc_ids=None):
        same = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)
        later = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).triu()
        positions = ((same & later).sum(dim=-1) - 1).clamp(max=self.cfg.seq_len - 1)
        x = self.embed(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, None)
        return self.head(self.norm(x))


class NextSegmentEmbedding(GPT):
    """A segment embedding of the NEXT position's document added to each position (a roll the wrong way), so
    each token knows whether its document ends: a leak the token embedding's gradient never shows."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__(cfg)
        self.segment = nn.Embedding(cfg.seq_len, cfg.d_model)

    def forward(self, tokens, doc_ids=None):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        x = x + torch.roll(self.segment(doc_ids.clamp(min=0) % self.cfg.seq_len), -1, dims=1)
        for block in self.blocks:
            x = block(x, None)
        return self.head(self.norm(x))


class BatchNormOverPositions(GPT):
    """A BatchNorm over the model width after the embeddings: in train mode its batch statistics mix every
    position of every sequence (future ones included); in eval mode its running statistics are causal."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__(cfg)
        self.batch_norm = nn.BatchNorm1d(cfg.d_model)

    def forward(self, tokens, doc_ids=None):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        x = self.batch_norm(x.transpose(1, 2)).transpose(1, 2)
        for block in self.blocks:
            x = block(x, None)
        return self.head(self.norm(x))


def shifts_targets_again(outputs, targets):
    """The loss shifts the (already next-token) targets a second time."""
    return F.cross_entropy(outputs[:, :-1].reshape(-1, outputs.shape[-1]).float(), targets[:, 1:].reshape(-1),
                           ignore_index=IGNORE)


def shifts_targets_back(outputs, targets):
    """The loss shifts the targets the other way (each output scored on the previous position's target)."""
    return F.cross_entropy(outputs[:, 1:].reshape(-1, outputs.shape[-1]).float(), targets[:, :-1].reshape(-1),
                           ignore_index=IGNORE)


def averages_over_padding(outputs, targets):
    """Per-token losses averaged over every position, padding (ignored targets) included."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]).float(), targets.reshape(-1), ignore_index=IGNORE,
                           reduction="none").mean()
