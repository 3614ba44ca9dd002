"""The trainer's FLOP count for MFU: every matmul of the model, attention by SDPA included."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ctpipe.components.engine.throughput import flops_per_sample
from ctpipe.components.tasks.causal_lm.model import GPT, flops_per_token
from ctpipe.components.tasks.causal_lm.sizes import LMConfig


@pytest.mark.parametrize("isolate_documents", [False, True])
def test_a_decoder_using_sdpa_is_counted_as_its_analytic_flops(isolate_documents):
    cfg = LMConfig(seq_len=32, d_model=32, n_layers=2, n_heads=4, isolate_documents=isolate_documents)
    torch.manual_seed(0)
    model = GPT(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (3, cfg.seq_len))
    example = (tokens, torch.zeros_like(tokens)) if isolate_documents else (tokens,)
    counted = flops_per_sample(model, example)
    # forward hooks alone see the projections and the MLP but not the attention matmuls inside SDPA
    assert counted == pytest.approx(flops_per_token(cfg) * cfg.seq_len, rel=1e-9)


def test_multihead_attention_is_counted_once():
    width, tokens, batch = 16, 10, 2
    layer = nn.MultiheadAttention(width, 2, batch_first=True)

    class Wrapper(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = layer

        def forward(self, x):
            return self.attention(x, x, x, need_weights=False)[0]

    counted = flops_per_sample(Wrapper(), (torch.randn(batch, tokens, width),))
    per_sample_forward = 2 * tokens * width * 4 * width + 4 * tokens * tokens * width
    assert counted == pytest.approx(3 * per_sample_forward)
