"""Text data on its own terms: partitions holding only a date partition and a text column (+ an optional
key) validate, snapshot and pass the sanity gate for causal_lm, which declares it needs no label; the
label checks are reported as not applicable. A tabular task without its label column stays an error.
"""

from __future__ import annotations

import json

import pytest

from ctpipe.components.lib.data.demo import write_day_partition
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents

SETTINGS = ["task.name=causal_lm", "data.text_column=body", "sanity.sample_rows=256", "train.batch_size=8"]


def text_partitions(root, columns: dict[str, str], days: int = 2):
    """The help-topic documents as ``days`` dated partitions with only ``columns`` (source -> name)."""
    docs = help_topic_documents().iloc[:360]
    frame = docs[list(columns)].rename(columns=columns)
    for day in range(days):
        write_day_partition(root, day, frame.iloc[day::days].reset_index(drop=True))
    return root


def validate(data, config, out):
    return validate_data(str(data), config, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "validation.md"), tracking_uri="", mlflow_run_id="")


def test_causal_lm_declares_it_needs_no_label_and_tabular_does():
    assert load_task(load_config(None, ["task.name=causal_lm"]).task).codec.needs_label is False
    assert load_task(load_config(None, []).task).codec.needs_label is True


@pytest.fixture(scope="module")
def unkeyed(tmp_path_factory):
    """Only ``date=`` and a text column named ``body`` (data.text_column), no key: split by content."""
    out = tmp_path_factory.mktemp("lm-unkeyed")
    data = text_partitions(out / "data", {"text": "body"})
    config = load_config(None, SETTINGS)
    result = validate(data, config, out)
    return out, config, result


def test_text_only_partitions_validate_and_snapshot(unkeyed):
    out, _, result = unkeyed
    assert result.rows["train"] > 0 and result.rows["val"] > 0 and result.rows["test"] > 0
    snapshot = load_snapshot(out / "snapshot")
    assert snapshot.schema.label is None and snapshot.schema.text_column == "body"
    texts = {split: set(snapshot.frame(split)["body"]) for split in ("train", "val", "test")}
    assert not texts["train"] & texts["val"] and not texts["train"] & texts["test"] and not texts["val"] & texts["test"]
    assert snapshot.state["text_column"] == "body"


def test_validation_writes_the_train_splits_byte_histogram_into_the_reference(unkeyed):
    """What the watcher's byte-unigram drift test compares with, summed over the streamed train batches."""
    out, _, _ = unkeyed
    train = load_snapshot(out / "snapshot").frame("train")["body"]
    reference = json.loads((out / "snapshot" / "reference_stats.json").read_text())
    byte_unigram = reference["distributions"]["body__byte_unigram"]
    assert sum(byte_unigram["counts"]) == sum(len(t.encode()) for t in train)
    assert byte_unigram["documents"] == byte_unigram["rows"] == len(train)
    assert "body__letter_share" in reference["numeric"]  # the class shares stay


def test_the_label_checks_are_reported_not_applicable(unkeyed):
    out, _, result = unkeyed
    report = (out / "validation.md").read_text()
    assert "## Not applicable" in report and "task has no label" in report
    not_applicable = [f for f in result.findings if f.not_applicable]
    assert {"label_not_null", "label_classes", "label_leakage"} <= {f.check for f in not_applicable}
    assert all("not applicable (task has no label)" in f.message for f in not_applicable)
    assert "not applicable" in (out / "docs.html").read_text()


def test_the_text_expectations_run_on_the_configured_text_column(unkeyed):
    _, _, result = unkeyed
    checked = {(f.check, f.column) for f in result.findings if f.source == "suite" and f.passed}
    assert ("expect_column_values_to_not_be_null", "body") in checked
    assert ("expect_column_values_to_be_between", "body__bytes") in checked
    assert ("expect_column_values_to_be_in_set", "body__valid_utf8") in checked


def test_text_only_snapshot_passes_the_sanity_gate(unkeyed, tmp_path):
    out, config, _ = unkeyed
    result = run_sanity_checks(str(out / "snapshot"), config, report_path=str(tmp_path / "r.md"),
                               first_batch_path=str(tmp_path / "fb.json"), tracking_uri="", mlflow_run_id="")
    assert result.passed
    assert json.loads((tmp_path / "fb.json").read_text())["rows"]


def test_keyed_text_partitions_split_documents_by_key(tmp_path):
    data = text_partitions(tmp_path / "data", {"doc_id": "doc_id", "text": "text"})
    config = load_config(None, ["task.name=causal_lm", "data.key=doc_id"])
    validate(data, config, tmp_path)
    snapshot = load_snapshot(tmp_path / "snapshot")
    ids = {split: set(snapshot.frame(split)["doc_id"]) for split in ("train", "val", "test")}
    assert sum(len(v) for v in ids.values()) == len(set().union(*ids.values())) == 360


def test_a_tabular_task_without_its_label_column_is_still_a_clear_error(tmp_path):
    data = text_partitions(tmp_path / "data", {"doc_id": "doc_id", "text": "text"})
    with pytest.raises(DataValidationError, match=r"label column 'label' is missing.*data\.label"):
        validate(data, load_config(None, ["data.key=doc_id"]), tmp_path)


def test_streamed_validation_of_text_only_partitions_reports_the_same(tmp_path):
    data = text_partitions(tmp_path / "data", {"text": "body"})
    config = load_config(None, [*SETTINGS, "validation.in_memory_rows=0"])
    result = validate(data, config, tmp_path)
    assert {f.check for f in result.findings if f.not_applicable} >= {"label_not_null", "label_leakage"}
    snapshot = load_snapshot(tmp_path / "snapshot")
    assert snapshot.schema.label is None and sum(snapshot.rows(s) for s in ("train", "val", "test")) == 360
