"""Each KFP adapter's own logic, through ``component.python_func`` with real artifacts on temp paths.

The kubeflow/pipelines-components pattern: no KFP runner, no mocks; the adapters run in order on a
small demo dataset (tracking on SQLite), each test checking what its adapter adds over the function it
calls: outputs and their metadata, the UI metrics it logs, the step record the local summary reads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import mlflow
import pytest
from kfp.dsl import HTML, Artifact, ClassificationMetrics, Dataset, Markdown, Metrics, Model

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.lineage import version_lineage
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.evaluate.component import evaluate
from ctpipe.components.steps.prepare_run.component import prepare_run
from ctpipe.components.steps.register.component import register
from ctpipe.components.steps.sanity_checks.component import sanity_checks
from ctpipe.components.steps.select_checkpoint.component import select_checkpoint
from ctpipe.components.steps.train.component import train
from ctpipe.components.steps.validate_data.component import validate_data
from tests.fixtures.corpus import write_clean

OVERRIDES = [
    "data.key=customer_id", "model.hidden=16", "model.depth=1", "model.embedding_dim=4", "model.dropout=0.0",
    "sanity.sample_rows=256", "sanity.overfit_steps=150", "sanity.short_train_steps=30",
    "train.workers=1", "train.max_steps=30", "train.warmup_steps=3", "train.eval_every=10",
    "train.checkpoint_every=10", "train.batch_size=32", "train.mixed_precision=fp32", "train.timeout_minutes=2",
    "evaluate.bootstrap_samples=200", "registry.retries=1", "registry.retry_backoff_seconds=0.05",
]  # fmt: skip


class Steps:
    """The run's home, its tracking URI and status directory, and a factory of artifacts on temp paths."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = local_tracking_uri(root)
        self.status = root / "status"

    def artifact(self, kind, name: str):
        # A local URI is the artifact's path, as KFP's local runner gives it.
        return kind(name=name, uri=str(self.root / "artifacts" / name), metadata={})

    def record(self, step: str) -> dict:
        return json.loads((self.status / f"{step}.json").read_text())


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapters")
    (root / "artifacts").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(STATUS_DIR_ENV, str(root / "status"))
        yield Steps(root)


@pytest.fixture(scope="module")
def data(steps):
    return write_clean(steps.root / "data")


@pytest.fixture(scope="module")
def prepared(steps, data):
    return prepare_run.python_func(config_json="", config_overrides="\n".join(OVERRIDES),
                                   mlflow_tracking_uri=steps.uri, pipeline_run_id="p1", trigger="ci",
                                   data_uri=str(data), trigger_report=steps.artifact(HTML, "trigger_report"))


@pytest.fixture(scope="module")
def validated(steps, prepared, data):
    outputs = {"snapshot": steps.artifact(Dataset, "snapshot"), "data_docs": steps.artifact(HTML, "data_docs"),
               "validation_report": steps.artifact(Markdown, "validation_report")}
    returned = validate_data.python_func(data_uri=str(data), config_json=prepared.config_json,
                                         mlflow_tracking_uri=steps.uri, mlflow_run_id=prepared.mlflow_run_id,
                                         **outputs)
    return returned, outputs


@pytest.fixture(scope="module")
def sane(steps, prepared, validated):
    outputs = {"sanity_report": steps.artifact(Markdown, "sanity_report"),
               "first_batch": steps.artifact(Artifact, "first_batch"),
               "sanity_summary": steps.artifact(Artifact, "sanity_summary")}
    returned = sanity_checks.python_func(snapshot=validated[1]["snapshot"], config_json=prepared.config_json,
                                         mlflow_tracking_uri=steps.uri, mlflow_run_id=prepared.mlflow_run_id,
                                         **outputs)
    return returned, outputs


@pytest.fixture(scope="module")
def trained(steps, prepared, validated, sane):
    outputs = {"checkpoints": steps.artifact(Artifact, "checkpoints"),
               "train_metrics": steps.artifact(Metrics, "train_metrics")}
    returned = train.python_func(snapshot=validated[1]["snapshot"], config_json=prepared.config_json,
                                 mlflow_tracking_uri=steps.uri, mlflow_run_id=prepared.mlflow_run_id, job_name="p1",
                                 sanity_summary=sane[0], **outputs)
    return returned, outputs


@pytest.fixture(scope="module")
def selected(steps, prepared, validated, trained):
    model = steps.artifact(Model, "model")
    returned = select_checkpoint.python_func(checkpoints=trained[1]["checkpoints"], snapshot=validated[1]["snapshot"],
                                             config_json=prepared.config_json, model=model)
    return returned, model


@pytest.fixture(scope="module")
def evaluated(steps, prepared, validated, sane, selected):
    outputs = {"metrics": steps.artifact(Metrics, "metrics"),
               "classification": steps.artifact(ClassificationMetrics, "classification"),
               "blessing": steps.artifact(Artifact, "blessing"), "model_card": steps.artifact(Markdown, "model_card")}
    returned = evaluate.python_func(model=selected[1], snapshot=validated[1]["snapshot"],
                                    sanity_summary=sane[1]["sanity_summary"], config_json=prepared.config_json,
                                    mlflow_tracking_uri=steps.uri, mlflow_run_id=prepared.mlflow_run_id, **outputs)
    return returned, outputs


def test_prepare_run_returns_the_resolved_config_and_the_run_it_opened(steps, prepared):
    config = load_config(None, OVERRIDES)
    assert json.loads(prepared.config_json) == config.to_dict()
    run = mlflow.MlflowClient(tracking_uri=steps.uri).get_run(prepared.mlflow_run_id)
    assert run.data.tags["ctpipe.pipeline_run_id"] == "p1" and run.data.tags["ctpipe.trigger"] == "ci"
    assert steps.record("prepare_run")["result"] == {
        "mlflow_run_id": prepared.mlflow_run_id, "pipeline_run_id": "p1",
        "data_fingerprint": prepared.data_fingerprint, "training_run_id": prepared.training_run_id,
        "mlflow_experiment_id": run.info.experiment_id, "trigger_report": "none",
    }
    assert "comes with no report page" in (steps.root / "artifacts" / "trigger_report").read_text()
    assert len(prepared.data_fingerprint) == 64 and prepared.training_run_id != prepared.mlflow_run_id


def test_prepare_run_shows_the_watchers_page_only_when_its_digest_matches(steps, data):
    import hashlib

    page = steps.root / "decay-1-2026-03-15.html"
    page.write_text("<!doctype html><html><body><h1>decay of version 1</h1></body></html>")
    for run_id, digest, shown in (("p2", hashlib.sha256(page.read_bytes()).hexdigest(), True), ("p3", "0" * 64, False)):
        out = steps.artifact(HTML, f"trigger_report_{run_id}")
        prepare_run.python_func(config_json="", config_overrides="\n".join(OVERRIDES), mlflow_tracking_uri=steps.uri,
                                pipeline_run_id=run_id, trigger="decay", data_uri=str(data), trigger_report=out,
                                trigger_report_uri=str(page), trigger_report_sha256=digest)
        assert (Path(out.path).read_bytes() == page.read_bytes()) is shown
        assert steps.record("prepare_run")["result"]["trigger_report"].startswith("published" if shown else "refused")


def test_validate_data_marks_the_snapshot_and_counts_the_warnings(steps, prepared, validated):
    (fingerprint, warnings), outputs = validated
    snapshot = outputs["snapshot"]
    assert snapshot.metadata["fingerprint"] == fingerprint and len(fingerprint) == 64
    assert sum(snapshot.metadata["rows"].values()) == 900
    verdict = json.loads((Path(snapshot.path) / "validation.json").read_text())
    assert warnings == len(verdict["warnings"])
    record = steps.record("validate_data")
    assert record["status"] == "passed" and record["result"]["warnings"] == verdict["warnings"]
    assert Path(outputs["data_docs"].path).read_text().startswith("<!DOCTYPE html>")
    # In MLflow with the extensions a browser and MLflow's viewer need (before: `data_docs`, shown as source).
    logged = {a.path for a in mlflow.MlflowClient(tracking_uri=steps.uri).list_artifacts(
        prepared.mlflow_run_id, "validation")}
    assert {"validation/data_docs.html", "validation/validation_report.md"} <= logged, logged


def test_sanity_checks_returns_the_summary_it_writes_for_the_later_steps(steps, sane):
    returned, outputs = sane
    written = json.loads(Path(outputs["sanity_summary"].path).read_text())
    assert json.loads(returned) == written and written["passed"] is True
    assert steps.record("sanity_checks")["result"] == written
    assert Path(outputs["sanity_report"].path).read_text().startswith("# Sanity checks: PASSED")


def test_train_logs_its_metrics_and_returns_the_best_step(steps, trained):
    returned, outputs = trained
    logged = outputs["train_metrics"].metadata
    assert returned.steps == 30 and returned.best_step in (10, 20, 30)
    assert logged["steps"] == 30.0 and logged["best_step"] == float(returned.best_step)
    assert steps.record("train")["status"] == "passed"


def test_select_checkpoint_describes_the_model_it_exports(steps, selected):
    returned, model = selected
    assert model.metadata["step"] == returned.step and model.metadata["value"] == returned.metric
    assert model.metadata["metric"] == "val_accuracy" and len(model.metadata["sha256"]) == 64
    assert model.metadata["format_version"] == 1  # lib/handoffs.SelectionRecord
    assert steps.record("select_checkpoint")["result"]["model_path"] == model.path and Path(model.path).is_file()


def test_evaluate_logs_only_finite_figures_and_the_blessing(steps, evaluated):
    returned, outputs = evaluated
    blessing = json.loads(Path(outputs["blessing"].path).read_text())
    logged = outputs["metrics"].metadata
    candidate = {f"candidate_{k}": v for k, v in blessing["candidate_metrics"].items()}
    bounds = {f"{k}_ci_{side}" for k in blessing["intervals"] for side in ("low", "high")}
    assert set(logged) == {*candidate, *bounds, "blessed"}  # no champion yet: no champion_* figures
    assert candidate.items() <= logged.items() and all(math.isfinite(v) for v in logged.values())
    assert logged["blessed"] == (1.0 if blessing["blessed"] else 0.0) and returned.blessed == blessing["blessed"]
    assert returned.champion_version == ""  # the first model: no champion
    assert outputs["blessing"].metadata == {"blessed": blessing["blessed"], "reasons": blessing["reasons"]}
    matrix = outputs["classification"].metadata["confusionMatrix"]
    assert [c["displayName"] for c in matrix["annotationSpecs"]] == blessing["class_names"]
    assert "- gate: passed" in Path(outputs["model_card"].path).read_text()


def test_register_hands_the_reports_and_the_sanity_summary_over(steps, prepared, validated, sane, selected, evaluated):
    returned = register.python_func(
        model=selected[1], snapshot=validated[1]["snapshot"], blessing=evaluated[1]["blessing"],
        validation_report=validated[1]["validation_report"], sanity_report=sane[1]["sanity_report"],
        sanity_summary=sane[1]["sanity_summary"], model_card=evaluated[1]["model_card"],
        config_json=prepared.config_json, mlflow_tracking_uri=steps.uri, mlflow_run_id=prepared.mlflow_run_id,
        pipeline_run_id="p1", trigger="ci",
    )  # fmt: skip
    assert returned.model_version == "1" and returned.aliases.split(",") == sorted(returned.aliases.split(","))
    client = mlflow.MlflowClient(tracking_uri=steps.uri, registry_uri=steps.uri)
    reports = {a.path for a in client.list_artifacts(prepared.mlflow_run_id, "reports")}
    assert {"reports/validation.md", "reports/sanity.md", "reports/model_card.md", "reports/blessing.json"} <= reports
    version = client.get_model_version(load_config(None, OVERRIDES).registry.model_name, "1")
    assert version_lineage(client, version)["sanity"]["status"] == "passed"
    assert steps.record("register")["result"]["version"] == "1"
