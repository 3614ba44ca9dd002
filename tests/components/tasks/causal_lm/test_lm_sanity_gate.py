"""The sanity gate stops a causal LM that sees what it must predict, naming the bug, before any training.

The real gate (``run_sanity_checks``) on a snapshot of the demo text: the real model passes the sequence
checks; a model without the causal mask, a model that claims document isolation but attends across
packed documents, and an encoding whose targets are not shifted (or shifted the wrong way) each fail.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
import torch.nn.functional as F

from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.tasks.causal_lm import make_task
from ctpipe.components.tasks.causal_lm.corpus import write_text_demo_data
from ctpipe.components.tasks.causal_lm.model import GPT, CausalSelfAttention
from ctpipe.components.tasks.causal_lm.sizes import lm_config
from ctpipe.components.tasks.registry import _CACHE
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.components.tasks.causal_lm.test_lm_causality import LeaksInTrainModeAttention

# Few training steps: the broken models must fail on the sequence checks, which need no training.
QUICK = ["sanity.overfit_steps=5", "sanity.short_train_steps=5", "sanity.sample_rows=64",
         "train.batch_size=8", "train.warmup_steps=1"]


def settings(extra=()) -> list[str]:
    return ["task.name=causal_lm", *make_task().demo.settings, *QUICK, *extra]


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm-gate")
    write_text_demo_data(root / "data", days=2)
    return str(build_snapshot(str(root / "data"), load_config(None, settings()), root / "snapshot").root)


def gate(snapshot_dir, tmp_path, config, factory=None):
    return run_sanity_checks(
        snapshot_dir, config, report_path=str(tmp_path / "r.md"), first_batch_path=str(tmp_path / "fb.json"),
        tracking_uri="", mlflow_run_id="", model_factory=factory)


def failure(snapshot_dir, tmp_path, config, factory=None) -> str:
    with pytest.raises(SanityCheckError) as err:
        gate(snapshot_dir, tmp_path, config, factory)
    return str(err.value)


class NoMaskAttention(CausalSelfAttention):
    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.n_heads, c // self.n_heads).permute(2, 0, 3, 1, 4)
        return self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, c))


def no_mask_model():
    model = GPT(lm_config("tiny"))
    for block in model.blocks:
        block.attn.__class__ = NoMaskAttention
    return model


class LeakyIsolation(GPT):
    def forward(self, tokens, doc_ids=None):
        return super().forward(tokens, None)


def sequence_results(snapshot_dir, tmp_path, config, factory=None) -> dict:
    """The sequence checks' verdicts from the gate's summary (the quick settings may fail training checks)."""
    import json

    summary = tmp_path / "summary.json"
    try:
        run_sanity_checks(snapshot_dir, config, report_path=str(tmp_path / "r.md"),
                          first_batch_path=str(tmp_path / "fb.json"), tracking_uri="", mlflow_run_id="",
                          summary_path=str(summary), model_factory=factory)
    except SanityCheckError:
        pass
    return json.loads(summary.read_text())["checks"]


def test_the_real_model_passes_the_sequence_checks(snapshot_dir, tmp_path):
    checks = sequence_results(snapshot_dir, tmp_path, load_config(None, settings()))
    for name in ("next_token_targets", "causal_gradient", "future_tokens", "sequence_independence",
                 "first_batch_roundtrip"):
        assert checks[name]["passed"], checks[name]["message"]
    # The report names the decoder the checks ran on, not the tabular model section (`mlp`, hidden, depth).
    report = (tmp_path / "r.md").read_text()
    assert "Model `causal_lm` (vocab_size 259, seq_len 64, d_model 64, n_layers 2, n_heads 4" in report
    assert "Model `mlp`" not in report and "hidden" not in report


def test_a_model_without_a_causal_mask_is_stopped(snapshot_dir, tmp_path):
    message = failure(snapshot_dir, tmp_path, load_config(None, settings()), no_mask_model)
    assert "causal_gradient" in message and "FUTURE tokens" in message


def test_a_model_that_sees_the_future_only_while_training_is_stopped(snapshot_dir, tmp_path):
    def factory():
        model = GPT(lm_config("tiny"))
        for block in model.blocks:
            block.attn.__class__ = LeaksInTrainModeAttention
        return model

    message = failure(snapshot_dir, tmp_path, load_config(None, settings()), factory)
    assert "future_tokens" in message and "only in TRAIN mode" in message


def test_attention_across_packed_documents_is_stopped_when_isolation_is_claimed(snapshot_dir, tmp_path):
    def factory():
        return LeakyIsolation(lm_config("tiny", isolate_documents=True))

    message = failure(snapshot_dir, tmp_path, load_config(None, settings()), factory)
    assert "document_isolation" in message and "attention crosses packed documents" in message


@pytest.fixture
def broken_encoding(tmp_path, monkeypatch):
    """A user's task module whose encode() shifts the targets wrongly (or not at all)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "lm_broken_shift.py").write_text(textwrap.dedent('''
        import torch
        from ctpipe.components.tasks import Batch
        from ctpipe.components.tasks.causal_lm.packing import IGNORE
        from ctpipe.components.tasks.causal_lm.task import CausalLM

        class Unshifted(CausalLM):
            def encode(self, frame, state):
                b = super().encode(frame, state)
                return Batch(b.inputs, torch.where(b.targets == IGNORE, IGNORE, b.inputs[0]))

        class Backwards(CausalLM):
            def encode(self, frame, state):
                b = super().encode(frame, state)
                targets = torch.full_like(b.targets, IGNORE)
                targets[:, 1:] = b.inputs[0][:, :-1]
                return Batch(b.inputs, targets)

        def unshifted(**options):
            return Unshifted(**options)

        def backwards(**options):
            return Backwards(**options)
    '''))
    yield
    sys.modules.pop("lm_broken_shift", None)
    _CACHE.clear()


@pytest.mark.parametrize(("factory", "needle"), [("unshifted", "targets are not shifted"),
                                                 ("backwards", "shifted the wrong way")])
def test_targets_that_are_not_the_next_token_are_stopped(snapshot_dir, tmp_path, broken_encoding, factory, needle):
    config = load_config(None, settings([f"task.entrypoint=lm_broken_shift:{factory}"]))
    message = failure(snapshot_dir, tmp_path, config)
    assert "next_token_targets" in message and needle in message
