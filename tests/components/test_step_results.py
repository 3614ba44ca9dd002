"""Validation and sanity results reach the model card and the registered version as files, never via MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import yaml

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.handoffs import read_sanity, read_validation
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.sanity_checks.report import SanityResult
from ctpipe.components.steps.validate_data.findings import WARNING, Finding
from ctpipe.components.steps.validate_data.report import ValidationSummary
from ctpipe.components.steps.validate_data.validate import summary_json, validate_data
from ctpipe.components.tasks.protocol import CheckResult
from tests.fixtures.corpus import KEY, write_clean
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


def test_the_card_and_the_version_take_the_gates_from_the_step_files_not_from_mlflow(tmp_path):
    snap = make_snapshot(tmp_path)
    model = make_model(snap, tmp_path / "model.pt", steps=80)
    verdict = ValidationSummary(data_uri="x", findings=[
        Finding(check="null_fraction", passed=False, severity=WARNING, column="sessions_last_30d",
                message="null fraction above profile", observed="0.03", expected="<= 0.02"),
        Finding(check="unseen | category", passed=False, severity=WARNING, message="a | in the message"),
        Finding(check="in_range", passed=True, column="tenure_months"),
    ])  # fmt: skip
    (snap / "validation.json").write_text(json.dumps(summary_json(verdict), default=str))
    gate = SanityResult(checks=[CheckResult("overfit_one_batch", True, 0.01, "< 0.05", "memorised"),
                                CheckResult("finite", True, 0.0, "0 non-finite steps", "none")], seconds=2.5)
    sanity_path = tmp_path / "sanity_summary"  # a KFP artifact path: no extension
    sanity_path.write_text(json.dumps(gate.summary()))

    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    run_id = make_run(uri, config, "p1")
    # What the run says about the gates is stale: the step files are the record, MLflow is not read back.
    client = mlflow.MlflowClient(tracking_uri=uri)
    client.log_metric(run_id, "sanity.overfit_one_batch", 9.0)
    client.log_metric(run_id, "validation.warnings", 7.0)
    client.set_tag(run_id, "ctpipe.sanity", "failed")
    client.set_tag(run_id, "ctpipe.validation", "failed")

    blessing, card = tmp_path / "blessing", tmp_path / "model_card"
    evaluated = evaluate_candidate(str(model), str(snap), config, tracking_uri=uri, mlflow_run_id=run_id,
                                   blessing_path=str(blessing), card_path=str(card), sanity_summary_path=str(sanity_path))
    text = card.read_text()
    # The card a person is shown opens as Markdown: KFP's output file (``model_card``) has no extension.
    assert evaluated.model_card == f"{card}.md" and Path(f"{card}.md").read_text() == text
    assert "- gate: passed in 2.50 s" in text
    assert "- overfit_one_batch: 0.0100 (pass; threshold < 0.05)" in text and "- finite: 0.0000 (pass" in text
    assert "- data validation: passed with 2 warning(s)" in text
    assert "pipeline run: `p1`; trigger: `manual`" in text  # lineage tags still come from the run

    result = register_candidate(str(model), str(snap), str(blessing), config, tracking_uri=uri, mlflow_run_id=run_id,
                                pipeline_run_id="p1", trigger="manual", reports={"model_card": str(card)},
                                sanity_summary_path=str(sanity_path))
    registry = Registry(uri, config.registry)
    lineage = registry.lineage(registry.get_version(result.version))
    assert lineage["validation_warnings"] == [
        "sessions_last_30d: null fraction above profile", "a | in the message"]
    assert lineage["sanity"] == {
        "status": "passed", "checks": {"finite": 0.0, "overfit_one_batch": 0.01, "seconds": 2.5}}


def test_without_the_step_files_the_gates_are_not_recorded_rather_than_guessed(tmp_path):
    assert read_sanity("").status == "not recorded" and read_sanity(tmp_path / "absent").checks == {}
    assert read_validation(tmp_path).status == "not recorded" and read_validation(tmp_path).warnings == []
    (tmp_path / "validation.json").write_text("{ cut short")
    with pytest.raises(ValueError, match=r"validation.json' is not valid JSON .*run the pipeline again"):
        read_validation(tmp_path)


def test_validation_and_sanity_write_the_files_the_later_steps_read(tmp_path):
    config = Config.from_dict({"data": {"key": KEY}, "model": {"hidden": 32, "depth": 1, "dropout": 0.0},
                               "sanity": {"sample_rows": 512, "overfit_steps": 150, "short_train_steps": 40}})
    data = write_clean(tmp_path / "data")
    validated = validate_data(str(data), config, snapshot_dir=str(tmp_path / "snapshot"), data_docs_path="",
                              report_path="", tracking_uri="", mlflow_run_id="")
    outcome = read_validation(tmp_path / "snapshot")
    assert outcome.status == "passed" and len(outcome.warnings) == len(validated.warnings)

    result = run_sanity_checks(str(tmp_path / "snapshot"), config, report_path=str(tmp_path / "sanity.md"),
                               first_batch_path=str(tmp_path / "first_batch.json"),
                               summary_path=str(tmp_path / "sanity_summary"), tracking_uri="", mlflow_run_id="")
    assert json.loads((tmp_path / "sanity_summary").read_text()) == {**json.loads(json.dumps(result.summary())), "format_version": 1}
    gate = read_sanity(tmp_path / "sanity_summary")
    assert gate.status == "passed" and set(gate.checks) == {c.name for c in result.checks}

    skipped = Config.from_dict({**config.to_dict(), "sanity": {**config.to_dict()["sanity"], "enabled": False}})
    run_sanity_checks(str(tmp_path / "snapshot"), skipped, report_path="", first_batch_path="",
                      summary_path=str(tmp_path / "skipped"), tracking_uri="", mlflow_run_id="")
    assert read_sanity(tmp_path / "skipped").status == "skipped"


def test_the_pipeline_hands_the_sanity_summary_file_to_evaluation_and_registration(tmp_path):
    from ctpipe.pipelines.compile import compile_pipeline

    spec = next(yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", None, [], image=None).read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    for consumer in ("evaluate", "register"):
        source = tasks[consumer]["inputs"]["artifacts"]["sanity_summary"]["taskOutputArtifact"]
        assert source == {"outputArtifactKey": "sanity_summary", "producerTask": "sanity-checks"}, consumer


def test_each_hand_off_file_is_a_versioned_record_and_a_newer_format_is_refused(tmp_path):
    """One typed record per file, with its format version; a step of an older image refuses a newer file
    instead of misreading it, and a file that is not the record it should be is named."""
    from ctpipe.components.lib.handoffs import (
        FORMAT_VERSION,
        SanitySummary,
        ValidationVerdict,
        write_record,
        write_validation,
    )

    verdict = ValidationVerdict(passed=True, data_uri="d", fingerprint="f" * 64, rows={"train": 3}, errors=[],
                                warnings=["age: 2% nulls"], findings=[])
    write_validation(tmp_path, verdict)
    written = json.loads((tmp_path / "validation.json").read_text())
    assert written["format_version"] == FORMAT_VERSION
    assert read_validation(tmp_path).status == "passed"
    write_record(tmp_path / "sanity.json", SanitySummary(passed=False, checks={"loss_at_init": {"value": 9.0}}))
    assert read_sanity(tmp_path / "sanity.json").status == "failed"

    (tmp_path / "validation.json").write_text(json.dumps({**written, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(ValueError, match="format"):
        read_validation(tmp_path)
    (tmp_path / "sanity.json").write_text(json.dumps({"checks": {}}))  # no verdict at all
    with pytest.raises(ValueError, match="not a SanitySummary"):
        read_sanity(tmp_path / "sanity.json")
