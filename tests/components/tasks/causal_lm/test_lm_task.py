"""The causal_lm task through the task protocol only: load by name, encode, train briefly, score, serve, drift."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from ctpipe.components.run_config import load_config
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from ctpipe.components.tasks.causal_lm.packing import IGNORE
from ctpipe.components.tasks.registry import complete_task


@pytest.fixture(scope="module")
def docs():
    frame = help_topic_documents()
    return frame.iloc[:60].reset_index(drop=True), frame.iloc[60:80].reset_index(drop=True)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is as fast, and far faster on a shared CPU (two threads spin-wait)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def task():
    return load_task(load_config(None, ["task.name=causal_lm", "task.options.size=tiny"]).task)


def test_causal_lm_is_a_complete_builtin_task(task):
    assert task.name == "causal_lm" and complete_task(task) is task
    assert {m.name: m.higher_is_better for m in task.scoring.metrics} == {"loss": False, "bits_per_byte": False}
    assert task.checks.sanity.sequence_dim == 1


def test_a_bad_size_is_a_clear_error():
    from ctpipe.components.tasks import TaskError

    with pytest.raises(TaskError, match="task.options.size.*allowed: tiny, small, gpt-350m"):
        load_task({"name": "causal_lm", "entrypoint": None, "options": {"size": "huge"}})


def test_a_missing_text_column_names_the_key(task, docs):
    train, _ = docs
    with pytest.raises(Exception, match=r"text column 'text' is not in the data.*data\.text_column"):
        task.codec.fit(train.rename(columns={"text": "body"}), None)


def test_the_schema_names_the_text_column(task, docs):
    from ctpipe.components.lib.data.snapshot import Schema

    train, _ = docs
    schema = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["body"],
                    text_column="body")
    assert task.codec.fit(train.rename(columns={"text": "body"}), schema)["text_column"] == "body"
    assert task.profile.own_columns(schema) == ["body"]


def test_training_through_the_protocol_beats_the_unigram_baseline(task, docs):
    train, val = docs
    state = task.codec.fit(train, None)
    batch = task.codec.encode(train, state)
    assert batch.inputs[0].shape[1] == 64 and len(batch) == batch.targets.shape[0]
    torch.manual_seed(0)
    model = task.model.build(None, state)
    with torch.no_grad():
        init = float(task.objective.loss(model(*batch.inputs), batch.targets))
    assert abs(init - math.log(259)) < 0.05 * math.log(259)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(150):
        idx = torch.randint(0, len(batch), (16,), generator=torch.Generator().manual_seed(step))
        part = batch.select(idx)
        loss = task.objective.loss(model(*part.inputs), part.targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    targets = task.codec.targets(val, state)
    model_metrics = task.scoring.compute_metrics(targets, task.scoring.predict(model, val, state, state))
    unigram = task.scoring.compute_metrics(targets, task.scoring.baseline(targets, state))
    assert model_metrics["bits_per_byte"] < unigram["bits_per_byte"] < 8.0
    assert model_metrics["loss"] < unigram["loss"]
    served = task.serving.serve(model, val.iloc[:2], state)
    assert list(served.columns) == ["loss", "bits_per_byte", "continuation"]
    assert served["continuation"].map(len).gt(0).all()


def test_per_document_rows_feed_a_document_bootstrap(task, docs):
    _, val = docs
    state = task.codec.fit(val, None)
    torch.manual_seed(0)
    rows = task.scoring.predict(task.model.build(None, state), val, state, state)
    assert rows.shape == (len(val), 3)
    assert np.array_equal(rows[:, 2], val["text"].map(lambda t: len(t.encode())).to_numpy())
    assert np.array_equal(rows[:, 1], rows[:, 2] + 1)  # every byte and the EOS, each predicted once
    whole = task.scoring.compute_metrics(task.codec.targets(val, state), rows)
    halves = [task.scoring.compute_metrics(None, rows[:10]), task.scoring.compute_metrics(None, rows[10:])]
    assert min(h["loss"] for h in halves) <= whole["loss"] <= max(h["loss"] for h in halves)


def test_extra_checks_pass_on_the_real_model_and_encoding(task, docs):
    train, _ = docs
    state = task.codec.fit(train, None)
    batch = task.codec.encode(train.iloc[:8], state)
    results = task.checks.extra_checks(lambda: task.model.build(None, state), batch, state)
    assert {r.name for r in results} == {"next_token_targets", "causal_gradient", "future_tokens",
                                         "sequence_independence"}
    assert all(r.passed for r in results), [r.message for r in results]
    assert bool((batch.targets == IGNORE).any())  # boundaries and padding are never predicted


def test_first_batch_dump_round_trips_to_the_raw_texts(task, docs):
    train, _ = docs
    state = task.codec.fit(train, None)
    batch = task.codec.encode(train.iloc[:4], state)
    dump = task.checks.describe_batch(batch, train.iloc[:4], state, None)
    assert task.checks.batch_mismatches(dump, train.iloc[:4], None) == []
    dump["rows"][0]["tokens"][5] = ord("#") if dump["rows"][0]["tokens"][5] != ord("#") else ord("$")
    assert task.checks.batch_mismatches(dump, train.iloc[:4], None)


def test_validation_columns_flag_empty_and_invalid_texts(task):
    frame = pd.DataFrame({"text": ["fine", "", "bad \udcff surrogate", b"\xff\xfe"]})
    checks = task.profile.check_columns(frame, None)
    assert checks["text__bytes"].tolist()[:2] == [4, 0]
    assert checks["text__valid_utf8"].tolist() == [True, True, False, False]
    kinds = {e["kwargs"]["column"]: e["type"] for e in task.profile.expectations(None)}
    assert kinds["text__bytes"] == "expect_column_values_to_be_between"
    assert kinds["text__valid_utf8"] == "expect_column_values_to_be_in_set"


def test_drift_columns_separate_help_topics_from_module_docstrings(task):
    help_docs = task.profile.drift_columns(help_topic_documents(), None)
    module_docs = task.profile.drift_columns(module_docstring_documents(), None)
    assert set(help_docs.columns) >= {"text__bytes", "text__letter_share", "text__non_ascii_share"}
    from scipy.stats import ks_2samp

    shifted = [c for c in help_docs.columns
               if ks_2samp(help_docs[c].dropna(), module_docs[c].dropna()).pvalue < 1e-3]
    assert shifted, "the drifted corpus should move at least one text statistic"


def test_paired_bootstrap_resamples_documents_like_the_generic_one(task):
    rng = np.random.default_rng(0)
    n_bytes = rng.integers(50, 500, 40).astype(float)
    rows_a = np.column_stack([n_bytes * rng.uniform(1.0, 2.0, 40), n_bytes + 1, n_bytes])
    rows_b = np.column_stack([rows_a[:, 0] * 1.1, n_bytes + 1, n_bytes])
    targets = np.column_stack([n_bytes, n_bytes])
    fast = task.scoring.bootstrap(targets, {"a": rows_a, "b": rows_b}, samples=200, seed=3)
    assert fast["a"]["bits_per_byte"].shape == (200,)
    # b is 10% worse on every document: every paired resample sees it, whatever the spread across documents
    assert bool((fast["b"]["loss"] > fast["a"]["loss"]).all())
    point = task.scoring.compute_metrics(targets, rows_a)["bits_per_byte"]
    low, high = np.quantile(fast["a"]["bits_per_byte"], [0.025, 0.975])
    assert low < point < high


def test_the_language_model_states_its_size_and_flops_for_mfu():
    """Benchmark facts of the built-in's implementation (``benchmarks/trainer.py``'s MFU), not task parts."""
    from ctpipe.components.tasks.causal_lm import CausalLM

    large = CausalLM(size="gpt-350m")
    assert large.parameter_count() >= 300_000_000
    # 6 N per token (N without the position table) plus attention: ~2.1 GFLOP per token at 1,024 positions
    assert 6 * 300e6 < large.flops_per_token() < 6 * 360e6


def test_a_documents_score_does_not_depend_on_the_documents_scored_with_it(task, docs):
    """The pyfunc and evaluation score each document on its own: before, documents were packed end to end,
    so a text's loss changed with the texts before it in the request (the model attended across them and
    the row cuts moved); the same document scored 3.87, 3.82 and 3.83 bits per byte in three requests."""
    train, val = docs
    state = task.codec.fit(train, None)
    torch.manual_seed(0)
    model = task.model.build(None, state)
    with torch.no_grad():  # a model far from uniform, so that context matters
        model.embed.weight.mul_(10.0)
    alone = task.serving.serve(model, val.iloc[[3]], state)
    for before in ([0], [1, 2], [5]):
        together = task.serving.serve(model, val.iloc[[*before, 3]], state).iloc[-1]
        assert together["loss"] == pytest.approx(alone["loss"].iloc[0], rel=1e-6)
        assert together["bits_per_byte"] == pytest.approx(alone["bits_per_byte"].iloc[0], rel=1e-6)
    rows = task.scoring.predict(model, val, state, state)
    reversed_rows = task.scoring.predict(model, val.iloc[::-1], state, state)[::-1]
    np.testing.assert_allclose(rows, reversed_rows, rtol=1e-6)


def test_an_empty_text_has_no_bits_per_byte(task, docs):
    """Zero bytes: bits per byte is undefined. Before, the pyfunc divided the EOS's bits by 1 and served a
    finite number (72 bits per byte for a confident model) that ranked the empty text as the worst text."""
    train, _ = docs
    state = task.codec.fit(train, None)
    torch.manual_seed(0)
    served = task.serving.serve(task.model.build(None, state), pd.DataFrame({"text": ["", "abc"]}), state)
    assert math.isnan(served["bits_per_byte"].iloc[0]) and math.isfinite(served["loss"].iloc[0])
    assert math.isfinite(served["bits_per_byte"].iloc[1])


@pytest.mark.parametrize(("values", "needle"), [
    (["fine", None], r"1 non-text value\(s\) \(rows \[1\]\).*allowed: str or UTF-8 bytes"),
    (["fine", b"ab\xff"], r"1 value\(s\) that are not valid UTF-8 \(rows \[1\]\)"),
    (["bad \udcff surrogate", "fine"], r"1 value\(s\) that are not valid UTF-8 \(rows \[0\]\)"),
])
def test_served_texts_that_are_not_valid_text_are_a_clear_error(task, docs, values, needle):
    """Before, invalid UTF-8 bytes were scored as another text (b'ab\\xff', 3 bytes, as 'ab\\ufffd', 5 bytes:
    bits per byte over the wrong bytes) and a lone surrogate raised a bare UnicodeEncodeError naming no row."""
    from ctpipe.components.lib.errors import DataValidationError

    train, _ = docs
    state = task.codec.fit(train, None)
    torch.manual_seed(0)
    with pytest.raises(DataValidationError, match=needle):
        task.serving.serve(task.model.build(None, state), pd.DataFrame({"text": pd.Series(values, dtype=object)}), state)
