"""What the registered model does for raw texts: score each document, and continue a prompt.

``score_texts`` gives each text's loss (nats per predicted token) and bits per byte;
``generate`` continues a prompt byte by byte (greedy by default; sampled with a temperature and seed),
within the model's context window, stopping at EOS.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch
from torch import nn

from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.metrics import BYTES, NLL, TOKENS, document_losses


def score_texts(model: nn.Module, texts: list[str], *, seq_len: int) -> pd.DataFrame:
    """Per text: ``loss`` (nats per predicted token) and ``bits_per_byte`` (NaN for an empty text: no bytes)."""
    rows = document_losses(model, texts, seq_len=seq_len)
    with np.errstate(invalid="ignore", divide="ignore"):
        return pd.DataFrame({
            "loss": rows[:, NLL] / rows[:, TOKENS],
            "bits_per_byte": np.where(rows[:, BYTES] > 0, rows[:, NLL] / math.log(2) / rows[:, BYTES], np.nan),
        })


@torch.no_grad()
def generate(
    model: nn.Module, prompt: str, *, seq_len: int, max_new_tokens: int = 64, temperature: float = 0.0, seed: int = 0
) -> str:
    """The continuation of ``prompt`` (without the prompt), up to ``max_new_tokens`` bytes or EOS."""
    was_training = model.training
    model.eval()
    tokens = torch.from_numpy(tokenizer.encode(prompt, eos=False)).unsqueeze(0)
    generator = torch.Generator().manual_seed(seed)
    new: list[int] = []
    for _ in range(max_new_tokens):
        window = tokens[:, -seq_len:]
        logits = model(window, torch.zeros_like(window))[0, -1].float()
        logits[[tokenizer.BOS, tokenizer.PAD]] = -math.inf  # never emitted mid-document
        if temperature > 0:
            nxt = int(torch.multinomial(torch.softmax(logits / temperature, dim=-1), 1, generator=generator))
        else:
            nxt = int(logits.argmax())
        if nxt == tokenizer.EOS:
            break
        new.append(nxt)
        tokens = torch.cat([tokens, torch.tensor([[nxt]])], dim=1)
    model.train(was_training)
    return tokenizer.decode(new)
