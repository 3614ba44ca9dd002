"""Issue 34's language-model blind spots: leaks the sequence checks missed on held-out models.

A leak behind a zero-initialised weight (seen only once the weight moves: the real gate re-runs every
structural check after its warm-up steps) and a leak through the document ids (positions counted from the
end of each document: the probes now change every sequence-aligned input and watch every embedding).
"""

from __future__ import annotations

import pytest
import torch

from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.loss_probes import check_loss_oracle, check_loss_padding
from ctpipe.components.tasks.causal_lm import make_task
from ctpipe.components.tasks.causal_lm.causality import sequence_checks
from ctpipe.components.tasks.causal_lm.sizes import lm_config
from ctpipe.testing.sequence_bugs import (
    BatchNormOverPositions,
    NextSegmentEmbedding,
    RemainingTokensPositions,
    averages_over_padding,
    shifts_targets_again,
    shifts_targets_back,
    zero_projection_without_mask,
)
from tests.components.tasks.causal_lm.test_lm_causality import batch, by_name, tiny
from tests.components.tasks.causal_lm.test_lm_sanity_gate import sequence_results, settings, snapshot_dir

__all__ = ["batch", "snapshot_dir"]  # fixtures


def test_a_leak_behind_a_zero_weight_passes_at_init_but_the_gate_stops_it_after_warm_up(snapshot_dir, tmp_path, batch):
    tokens, targets, doc_ids = batch
    torch.manual_seed(0)
    fresh = by_name(sequence_checks(zero_projection_without_mask(lm_config("tiny", seq_len=32)), tokens, targets, doc_ids))
    assert fresh["causal_gradient"].passed and fresh["future_tokens"].passed  # invisible on the fresh model

    checks = sequence_results(snapshot_dir, tmp_path, load_config(None, settings()),
                              lambda: zero_projection_without_mask(lm_config("tiny")))
    for name in ("causal_gradient", "future_tokens"):
        assert not checks[name]["passed"], checks[name]["message"]
        # gradients_flow finds the attention's qkv cut off by the zero projection at init, and says so here
        assert checks[name]["message"].startswith("after 5 training steps (zero-initialised layers hide part of the "
                                                  "model from the output at init): ")
    assert "sees FUTURE tokens" in checks["future_tokens"]["message"]


def test_the_real_model_still_passes_after_warm_up(snapshot_dir, tmp_path):
    checks = sequence_results(snapshot_dir, tmp_path, load_config(None, settings()))
    for name in ("causal_gradient", "future_tokens", "sequence_independence", "batch_independence"):
        assert checks[name]["passed"], checks[name]["message"]


def test_positions_counted_from_the_end_of_the_document_fail_naming_the_document_ids(batch):
    tokens, targets, doc_ids = batch
    torch.manual_seed(0)
    results = by_name(sequence_checks(RemainingTokensPositions(lm_config("tiny", seq_len=32)), tokens, targets, doc_ids))
    future = results["future_tokens"]
    assert not future.passed
    assert future.message.startswith("future document ids leak: the output at position")
    assert "how many tokens remain in its document" in future.message


def test_the_gradient_probe_watches_every_sequence_aligned_embedding(batch):
    tokens, targets, doc_ids = batch
    torch.manual_seed(0)
    result = by_name(sequence_checks(NextSegmentEmbedding(lm_config("tiny", seq_len=32)), *batch))["causal_gradient"]
    assert not result.passed
    assert "through embedding 1 of the sequence (positions or segments)" in result.message


def test_a_model_that_isolates_documents_is_not_blamed_for_reading_its_own_document_ids(batch):
    for model in (tiny(isolate_documents=True), tiny()):
        results = by_name(sequence_checks(model, *batch))
        assert results["future_tokens"].passed and results["causal_gradient"].passed, results




@pytest.mark.parametrize(("loss", "needle"), [(shifts_targets_again, "one position later"),
                                              (shifts_targets_back, "one position earlier")])
def test_a_loss_that_shifts_the_targets_fails_the_oracle_naming_the_shift(batch, loss, needle):
    tokens, targets, doc_ids = batch
    outputs = tiny()(tokens, doc_ids).detach()
    result = check_loss_oracle(loss, outputs, targets)
    assert not result.passed
    assert result.message.startswith(f"the loss shifts the targets: a predictor that knows the target {needle}")


def test_a_loss_that_averages_over_padding_fails_the_padding_probe(batch):
    tokens, targets, doc_ids = batch
    outputs = tiny()(tokens, doc_ids).detach()
    result = check_loss_padding(averages_over_padding, outputs, targets)
    assert not result.passed and result.message.startswith("padding changes the loss: ")
    assert "the loss averages over padding" in result.message


def test_the_task_loss_passes_both_loss_probes(batch):
    tokens, targets, doc_ids = batch
    outputs = tiny()(tokens, doc_ids).detach()
    task = make_task()
    for result in (check_loss_oracle(task.objective.loss, outputs, targets), check_loss_padding(task.objective.loss, outputs, targets)):
        assert result.passed, result.message
    assert check_loss_oracle(task.objective.loss, outputs, targets).value < 1e-6


def test_the_gate_stops_a_loss_that_shifts_the_targets_again_naming_the_shift(snapshot_dir, tmp_path):
    from ctpipe.components.lib.errors import SanityCheckError
    from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks

    with pytest.raises(SanityCheckError) as err:
        run_sanity_checks(snapshot_dir, load_config(None, settings()), report_path=str(tmp_path / "r.md"),
                          first_batch_path=str(tmp_path / "fb.json"), tracking_uri="", mlflow_run_id="",
                          loss_fn=shifts_targets_again)
    assert ("sanity check 'loss_oracle' failed before training, so the run stops here: loss_oracle: the loss shifts "
            "the targets: a predictor that knows the target one position later") in str(err.value)


def test_a_batch_norm_that_mixes_positions_in_train_mode_is_named(batch):
    torch.manual_seed(0)
    result = by_name(sequence_checks(BatchNormOverPositions(lm_config("tiny", seq_len=32)), *batch))["future_tokens"]
    assert not result.passed
    assert result.message.startswith("BatchNorm in train mode mixes positions: the output at position")
