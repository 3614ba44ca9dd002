"""The sequence checks catch the seeds' worst silent bug: a language model that sees what it must predict.

Each deliberately broken model or encoding fails with a message that names the bug; the real model passes.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.causality import sequence_checks
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents
from ctpipe.components.tasks.causal_lm.model import GPT, CausalSelfAttention, count_parameters
from ctpipe.components.tasks.causal_lm.packing import IGNORE, pack_documents
from ctpipe.components.tasks.causal_lm.sizes import lm_config


@pytest.fixture(scope="module")
def batch():
    texts = help_topic_documents()["text"].tolist()[:6]
    packed = pack_documents([t[:40] for t in texts], seq_len=32)
    return packed.inputs[:4], packed.targets[:4], packed.doc_ids[:4]


def tiny(**overrides) -> GPT:
    torch.manual_seed(0)
    return GPT(lm_config("tiny", seq_len=32, **overrides))


def by_name(results):
    return {r.name: r for r in results}


class NoMaskAttention(CausalSelfAttention):
    """The bug: full (bidirectional) attention."""

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class IgnoresDocumentsGPT(GPT):
    """The bug: claims to isolate documents but never passes the document mask."""

    def forward(self, tokens, doc_ids=None):
        return super().forward(tokens, None)


class MixesSequencesGPT(GPT):
    """The bug: a statistic over the whole batch leaks between sequences."""

    def forward(self, tokens, doc_ids=None):
        out = super().forward(tokens, doc_ids)
        return out + out.mean(dim=0, keepdim=True)


class LeaksInTrainModeAttention(CausalSelfAttention):
    """The bug: the causal mask only in eval mode (a training-only attention path that forgot it)."""

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=not self.training)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class OneWrongMaskEntryAttention(CausalSelfAttention):
    """The bug: a mask wrong at one position only (position 29 sees 30), e.g. an off-by-one at a block edge."""

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        allowed = torch.ones(t, t, dtype=torch.bool).tril()
        allowed[29, 30] = True
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class ShiftsTokensGPT(GPT):
    """The bug: an off-by-one shift of the token ids inside the model, before the embedding."""

    def forward(self, tokens, doc_ids=None):
        return super().forward(torch.roll(tokens, -1, dims=1), doc_ids)


def test_the_real_model_passes_every_sequence_check(batch):
    for model in (tiny(), tiny(isolate_documents=True)):
        results = by_name(sequence_checks(model, *batch))
        assert all(r.passed for r in results.values()), [r.message for r in results.values() if not r.passed]
    assert "document_isolation" in by_name(sequence_checks(tiny(isolate_documents=True), *batch))


def test_a_model_without_the_causal_mask_fails_naming_future_tokens(batch):
    model = tiny()
    for block in model.blocks:
        block.attn.__class__ = NoMaskAttention
    result = by_name(sequence_checks(model, *batch))["causal_gradient"]
    assert not result.passed
    assert "sees FUTURE tokens" in result.message and "causal mask" in result.message


def test_targets_not_shifted_fail_naming_the_shift(batch):
    tokens, _, doc_ids = batch
    result = by_name(sequence_checks(tiny(), tokens, tokens.clone(), doc_ids))["next_token_targets"]
    assert not result.passed and "targets are not shifted" in result.message


def test_targets_shifted_the_wrong_way_fail_naming_the_direction(batch):
    tokens, targets, doc_ids = batch
    wrong = torch.full_like(tokens, IGNORE)
    wrong[:, 1:] = tokens[:, :-1]
    result = by_name(sequence_checks(tiny(), tokens, wrong, doc_ids))["next_token_targets"]
    assert not result.passed and "shifted the wrong way" in result.message


def test_attention_across_packed_documents_fails_when_isolation_is_claimed(batch):
    torch.manual_seed(0)
    model = IgnoresDocumentsGPT(lm_config("tiny", seq_len=32, isolate_documents=True))
    results = by_name(sequence_checks(model, *batch))
    assert results["causal_gradient"].passed
    assert not results["document_isolation"].passed
    assert "attention crosses packed documents" in results["document_isolation"].message


def test_sequences_that_mix_across_the_batch_fail(batch):
    torch.manual_seed(0)
    model = MixesSequencesGPT(lm_config("tiny", seq_len=32))
    result = by_name(sequence_checks(model, *batch))["sequence_independence"]
    assert not result.passed and "sequences of a batch mix" in result.message


def test_loss_at_init_is_ln_vocabulary(batch):
    tokens, targets, doc_ids = batch
    with torch.no_grad():
        logits = tiny()(tokens, doc_ids)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)
    assert abs(float(loss) - math.log(tokenizer.VOCAB_SIZE)) < 0.05 * math.log(tokenizer.VOCAB_SIZE)


def test_head_is_tied_and_the_large_config_needs_sharding():
    model = tiny()
    assert model.head.weight is model.embed.weight
    assert count_parameters(lm_config("tiny")) < 200_000
    assert count_parameters(lm_config("gpt-350m")) >= 300_000_000  # on the meta device: no memory


def with_attention(cls) -> GPT:
    model = tiny()
    for block in model.blocks:
        block.attn.__class__ = cls
    return model


@pytest.mark.parametrize(("make", "needle"), [
    (lambda: with_attention(LeaksInTrainModeAttention), "only in TRAIN mode"),
    (lambda: with_attention(OneWrongMaskEntryAttention), "position 29 changes when the tokens from position 30"),
    (lambda: ShiftsTokensGPT(lm_config("tiny", seq_len=32)), "changes when the tokens from position"),
])
def test_future_tokens_the_gradient_probe_misses_are_caught(batch, make, needle):
    """Three models that see future tokens although the gradient at 12 probed positions in eval mode is clean:
    a mask only in eval mode, a mask wrong at one unprobed position, a shift of the ids before the embedding."""
    torch.manual_seed(0)
    results = by_name(sequence_checks(make(), *batch))
    assert results["causal_gradient"].passed  # why the token check is needed
    result = results["future_tokens"]
    assert not result.passed and needle in result.message and "sees FUTURE tokens" in result.message


class IsolatesOnlyInEvalGPT(GPT):
    """The bug: claims to isolate documents but passes the document mask only when evaluated."""

    def forward(self, tokens, doc_ids=None):
        return super().forward(tokens, None if self.training else doc_ids)


def test_attention_across_documents_only_while_training_fails_when_isolation_is_claimed(batch):
    torch.manual_seed(0)
    results = by_name(sequence_checks(IsolatesOnlyInEvalGPT(lm_config("tiny", seq_len=32, isolate_documents=True)),
                                      *batch))
    result = results["document_isolation"]
    assert not result.passed
    assert "attention crosses packed documents" in result.message and "only in TRAIN mode" in result.message
