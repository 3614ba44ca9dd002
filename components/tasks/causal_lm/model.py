"""A GPT-style decoder: pre-norm blocks, causal attention by ``scaled_dot_product_attention``, tied head.

The model knows nothing of devices, ranks or FSDP (``components/engine/parallelize.py`` shards
``model.blocks`` one by one, then the root). ``model(tokens, doc_ids)`` returns next-token logits
``[batch, seq, vocab]``; with ``isolate_documents`` a token attends only to earlier tokens of its own
document (``doc_ids``), otherwise to every earlier token of its row.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ctpipe.components.tasks.causal_lm.sizes import LMConfig


def attention_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """[batch, 1, seq, seq] boolean: query t may attend key s iff s <= t and both are in one document."""
    seq = doc_ids.shape[-1]
    causal = torch.ones(seq, seq, dtype=torch.bool, device=doc_ids.device).tril()
    same = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)
    return (causal & same).unsqueeze(1)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.n_heads, self.dropout = cfg.n_heads, cfg.dropout
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        # Fused causal kernel unless documents are isolated (then an explicit causal+document mask).
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=mask is None)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    """Pre-norm: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.drop(self.attn(self.norm1(x), mask))
        return x + self.drop(self.out(F.gelu(self.fc(self.norm2(x)))))


class GPT(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, a final norm and the head tied to the embedding."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.isolates_documents = cfg.isolate_documents
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.embed.weight  # weight tying
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2's init: N(0, 0.02), residual output projections scaled by 1/sqrt(2 * layers)."""
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                if module.weight.device.type != "meta":
                    nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None and module.bias.device.type != "meta":
                    nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.proj, block.out):
                if proj.weight.device.type != "meta":
                    proj.weight.mul_(1.0 / math.sqrt(2 * self.cfg.n_layers))

    def forward(self, tokens: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.cfg.seq_len:
            raise ValueError(f"sequence of {t} tokens is longer than the model's seq_len {self.cfg.seq_len}")
        positions = torch.arange(t, device=tokens.device)
        x = self.drop(self.embed(tokens) + self.pos(positions))
        mask = attention_mask(doc_ids) if self.isolates_documents and doc_ids is not None else None
        for block in self.blocks:
            x = block(x, mask)
        return self.head(self.norm(x))


def count_parameters(cfg: LMConfig) -> int:
    """Parameters of a ``GPT(cfg)`` built on the meta device (no memory; tied weights counted once)."""
    with torch.device("meta"):
        model = GPT(cfg)
    return sum(p.numel() for p in model.parameters())


def flops_per_token(cfg: LMConfig, seq_len: int | None = None) -> float:
    """Training FLOPs per token: 6 x (parameters in matmuls) + attention's 12 x layers x d_model x seq_len.

    The PaLM-paper estimate (forward + backward); embeddings' lookups are not matmuls, the tied head is.
    """
    t = seq_len or cfg.seq_len
    d, layers = cfg.d_model, cfg.n_layers
    matmul_params = layers * (4 * d * d + 2 * cfg.mlp_ratio * d * d) + cfg.vocab_size * d
    return 6.0 * matmul_params + 12.0 * layers * d * t
