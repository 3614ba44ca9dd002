"""The causal LM's data: the demo corpus, the byte tokenizer and the packing of documents into sequences."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from ctpipe.components.tasks.causal_lm import tokenizer
from ctpipe.components.tasks.causal_lm.corpus import (
    KEY_COLUMN,
    MIN_REPEATED_CHARS,
    TEXT_COLUMN,
    chunk_paragraphs,
    help_topic_documents,
    module_docstring_documents,
    write_text_demo_data,
)
from ctpipe.components.tasks.causal_lm.packing import IGNORE, pack_apart, pack_documents


def test_byte_tokenizer_round_trips_any_text_and_marks_documents():
    text = "naïve café → 𝛑 ok"
    tokens = tokenizer.encode(text)
    assert tokens[0] == tokenizer.BOS and tokens[-1] == tokenizer.EOS
    assert len(tokens) == tokenizer.byte_length(text) + 2
    assert tokenizer.decode(tokens) == text
    assert tokens.max() < tokenizer.VOCAB_SIZE


def test_packing_targets_are_next_tokens_within_a_document_only():
    texts = ["abc", "de", "fghij"]
    packed = pack_documents(texts, seq_len=4)
    stream = torch.cat([torch.from_numpy(tokenizer.encode(t)) for t in texts])
    flat_in, flat_tg, flat_doc = packed.inputs.flatten(), packed.targets.flatten(), packed.doc_ids.flatten()
    assert torch.equal(flat_in[: len(stream)], stream)
    for i in range(len(stream) - 1):
        if flat_doc[i] == flat_doc[i + 1]:
            assert flat_tg[i] == stream[i + 1]
        else:  # EOS -> next document's BOS is never a target
            assert flat_tg[i] == IGNORE and stream[i] == tokenizer.EOS
    # every document's bytes and EOS are predicted exactly once
    for d, text in enumerate(texts):
        assert int(((flat_doc == d) & (flat_tg != IGNORE)).sum()) == tokenizer.byte_length(text) + 1
    # padding: doc -1, nothing predicted
    assert bool((flat_tg[flat_doc == -1] == IGNORE).all())


def test_packing_apart_gives_each_document_rows_of_its_own():
    texts = ["abc", "de", "fghij"]
    packed = pack_apart(texts, seq_len=4)
    for row in range(len(packed)):
        assert len(set(packed.doc_ids[row].tolist()) - {-1}) == 1
        assert packed.inputs[row, 0] == tokenizer.BOS or packed.doc_ids[row - 1, -1] == packed.doc_ids[row, 0]
    for d, text in enumerate(texts):
        mine = packed.doc_ids == d
        assert torch.equal(packed.inputs[mine], torch.from_numpy(tokenizer.encode(text)))
        assert int((mine & (packed.targets != IGNORE)).sum()) == tokenizer.byte_length(text) + 1
    assert len(pack_apart([], seq_len=4)) == 0


def test_packing_rejects_a_too_short_sequence():
    with pytest.raises(ValueError, match="seq_len"):
        pack_documents(["x"], seq_len=1)


def test_chunks_keep_every_paragraph_and_respect_the_size_limit():
    text = "\n\n".join(f"paragraph {i} " + "word " * (i * 7 % 50) for i in range(40))
    docs = chunk_paragraphs(text, min_chars=200, max_chars=400)
    assert all(len(d) <= 400 for d in docs)
    assert "\n\n".join(docs).split("\n\n") == [p for p in text.split("\n\n")]


@pytest.mark.parametrize("documents", [help_topic_documents, module_docstring_documents])
def test_no_paragraph_of_the_demo_corpus_is_in_two_documents(documents):
    """The help topics repeat passages (``assignment`` and ``augassign`` share paragraphs): dropping only
    whole repeated documents left them in different documents, and 10.1% of the demo test split's bytes
    were paragraphs found verbatim in its train split (split salt ctpipe-v1). Each paragraph (but a short line) is kept once."""
    frame, seen = documents(), {}
    for key, text in zip(frame[KEY_COLUMN], frame[TEXT_COLUMN], strict=True):
        for para in (p for p in text.split("\n\n") if len(p) >= MIN_REPEATED_CHARS):  # not 'See also:'
            assert seen.setdefault(para, key) == key, f"{para[:60]!r} is in {seen[para]} and {key}"


def test_demo_corpus_is_real_text_in_dated_partitions(tmp_path):
    docs = help_topic_documents()
    assert len(docs) > 500 and docs[KEY_COLUMN].is_unique
    assert docs[TEXT_COLUMN].is_unique  # a repeated passage in two splits would leak the test set
    assert docs[KEY_COLUMN].str.startswith("assignment/").any()
    assert set(docs.columns) == {KEY_COLUMN, TEXT_COLUMN}  # no label: a language model needs none
    paths = write_text_demo_data(tmp_path, days=3, drift_from_day=2)
    assert [p.parent.name for p in paths] == ["date=2026-01-01", "date=2026-01-02", "date=2026-01-03"]
    frames = [pd.read_parquet(p) for p in paths]
    assert all(f[TEXT_COLUMN].str.len().min() > 0 for f in frames)
    assert sum(len(f) for f in frames[:2]) == len(docs)
    assert frames[2][KEY_COLUMN].str.startswith("module:").all()  # the drifted day: module docstrings


def test_demo_data_command_writes_the_text_corpus(tmp_path, capsys):
    from ctpipe.pipelines.cli.main import main

    assert main(["demo-data", "--task", "causal_lm", "--out", str(tmp_path), "--days", "3"]) == 0
    parts = sorted(tmp_path.glob("date=*/part-0.parquet"))
    assert len(parts) == 3 and set(pd.read_parquet(parts[0]).columns) == {KEY_COLUMN, TEXT_COLUMN}
    assert "causal_lm demo data" in capsys.readouterr().out
    assert main(["demo-data", "--task", "tabular_classification", "--out", str(tmp_path / "x")]) == 2


def test_a_drifted_demo_day_holds_no_more_documents_than_a_clean_day(tmp_path):
    """The README's `ctpipe demo-data --task causal_lm --out text --days 4 --drift-from-day 3`: before, the one
    drifted day held all 478 module docstrings against 268 help topics a clean day, more than twice the
    demo champion's largest partition, so a run on it (the watcher's drift run) stopped on the suite's
    partition row-count rule instead of showing drift. Drifted days now hold at most a clean day's count."""
    frames = [pd.read_parquet(p) for p in write_text_demo_data(tmp_path, days=4, drift_from_day=3)]
    clean, drifted = frames[:3], frames[3:]
    assert drifted[0][KEY_COLUMN].str.startswith("module:").all()
    assert 0 < len(drifted[0]) <= max(len(f) for f in clean)
