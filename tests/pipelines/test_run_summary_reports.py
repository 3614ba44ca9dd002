"""The run summary names the reports a person opens: the validation page and the model card, with extensions."""

from __future__ import annotations

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.pipelines.local.run_summary import format_summary
from tests.fixtures.step_records import summary_of


def test_the_summary_names_the_validation_page_and_the_model_card(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    docs, card = tmp_path / "validate-data" / "data_docs.html", tmp_path / "evaluate" / "model_card.md"
    with step_status("validate_data") as record:
        record.result = {"fingerprint": "f" * 64, "rows": {"train": 1}, "warnings": [], "data_docs": str(docs)}
    with step_status("evaluate") as record:
        record.result = {"blessed": True, "reasons": [], "candidate_metrics": {"accuracy": 0.9},
                         "model_card": str(card)}
    summary = summary_of(tmp_path)
    assert (summary["validation_page"], summary["model_card"]) == (str(docs), str(card))
    printed = format_summary(summary).splitlines()
    assert f"  validation page    {docs}" in printed and f"  model card         {card}" in printed


def test_a_run_without_reports_prints_no_empty_lines_for_them(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    with step_status("prepare_run"):
        pass
    text = format_summary(summary_of(tmp_path))
    assert "validation page" not in text and "model card" not in text
