"""The watcher judges text partitions: new help-topic documents do not drift, module docstrings do."""

from __future__ import annotations

from components.config import load_config
from components.data.snapshot import Schema
from components.tasks import load_task
from components.tasks.causal_lm.corpus import help_topic_documents, module_docstring_documents
from components.validation.validate import task_reference_stats
from pipelines.triggers.drift import compute_drift
from pipelines.triggers.watch import with_task_drift_columns


def test_text_drift_is_judged_on_length_and_byte_profile():
    config = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
    task = load_task(config.task)
    docs = help_topic_documents()
    train, fresh = docs.iloc[::2].reset_index(drop=True), docs.iloc[1::2].reset_index(drop=True)
    schema = Schema(label=None, key="doc_id", numeric=[], categorical=[], classes=[], other=["text"])
    reference = task_reference_stats(train, schema, task)
    assert {"text__bytes", "text__letter_share", "text__non_ascii_share"} <= set(reference["numeric"])

    same = compute_drift(with_task_drift_columns(fresh, reference, config), reference, config.watch)
    other = compute_drift(with_task_drift_columns(module_docstring_documents(), reference, config), reference,
                          config.watch)
    assert not same.drifted, [c for c in same.columns.values() if c.drifted]
    assert other.drifted
    assert any(name.startswith("text__") and col.drifted for name, col in other.columns.items())
