"""`ctpipe gc` keeps every run a kept version points to (issue 46): its own run, the content run its pipeline run
names (`ctpipe.training_run_id`: the training index and curves, the sanity report, Data Docs), and every run its
description and promotion record link; after gc every link of every kept version still resolves."""

from __future__ import annotations

import re
import tempfile
import time

import mlflow

from ctpipe.components.lib.config import Config, RegistryConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.tracking import TRAINING_RUN_TAG, local_tracking_uri
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.prepare_run.prepare import prepare_run
from ctpipe.pipelines.retention.gc import collect_garbage

RUNS_LINK = re.compile(r"runs:/([0-9a-f]{32})/([^\s`)]+)")


def _pipeline_run(home, uri, run_id: str, *overrides: str) -> tuple[str, str]:
    """A pipeline run as prepare_run opens it with caching: its own MLflow run and the content run it names."""
    prepared = prepare_run(load_config(None, list(overrides)).to_json(), "", tracking_uri=uri, pipeline_run_id=run_id,
                           trigger="manual", data_uri=str(home / "data"))
    client = mlflow.MlflowClient(uri)
    # What the cached steps log to the content run, and register to the pipeline run.
    client.log_text(prepared.training_run_id, "<html>Data Docs</html>", "validation/data_docs.html")
    client.log_text(prepared.training_run_id, "# Sanity\n", "sanity/sanity_report.md")
    client.log_text(prepared.mlflow_run_id, "# Card\n", "reports/model_card.md")
    client.log_text(prepared.mlflow_run_id, "flavors: {}\n", "model/MLmodel")
    for run in (prepared.training_run_id, prepared.mlflow_run_id):
        client.set_terminated(run, "FINISHED")
    return prepared.mlflow_run_id, prepared.training_run_id


def _links(client, version) -> dict[str, str]:
    """Every run a version points to, and the artifact it is linked for."""
    found = {version.run_id: "model/MLmodel"}
    training = client.get_run(version.run_id).data.tags.get(TRAINING_RUN_TAG)
    if training:
        found[training] = "validation/data_docs.html"
    for run_id, path in RUNS_LINK.findall(version.description or ""):
        found.setdefault(run_id, path)
    return found


def test_gc_with_keep_last_runs_1_keeps_every_run_a_registered_version_links(tmp_path):
    home = tmp_path
    write_demo_data(home / "data", days=2, rows_per_day=50, seed=1)
    uri = local_tracking_uri(home)
    registry = Registry(uri, RegistryConfig())
    run, training = _pipeline_run(home, uri, "p1")
    registry.ensure_registered_model()
    client = registry.client
    version = client.create_model_version(registry.name, f"runs:/{run}/model", run_id=run, tags={},
                                          description=f"Promoted v1: first model. [Model card](runs:/{run}/reports/model_card.md)")
    with registry.locked():
        client.set_registered_model_alias(registry.name, "champion", version.version)
    for n in range(3):  # newer runs of other configs: the champion's runs fall out of the newest keep_last_runs
        time.sleep(0.01)
        _pipeline_run(home, uri, f"p{n + 2}", f"train.max_steps={100 + n}")
    retention = RetentionConfig(keep_last_runs=1)
    report = collect_garbage(home, retention, Config().registry, uri)
    assert report.mlflow_runs_deleted, "the newer unregistered runs are collected"
    kept = registry.versions()
    assert [v.version for v in kept] == [version.version]
    for mv in kept:
        links = _links(client, mv)
        assert training in links
        for run_id, path in links.items():
            info = client.get_run(run_id).info
            assert info.lifecycle_stage == "active", f"version {mv.version} links run {run_id}, which gc deleted"
            with tempfile.TemporaryDirectory() as tmp:
                assert mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path=path, dst_path=tmp,
                                                           tracking_uri=uri)
    # The training run kept for the version is not a run that merely shares its content key: those went.
    assert training not in report.mlflow_runs_deleted


def test_a_content_run_nested_under_a_collected_pipeline_run_stays_while_a_kept_run_names_it(tmp_path):
    """Issue 47: the content run is a child of the pipeline run that first trained it, and a child goes with its
    parent. A later pipeline run that reused it from the cache (kept, the newest) still names it: it stays; the
    content run of a collected run that nothing kept names goes with it."""
    home = tmp_path
    write_demo_data(home / "data", days=2, rows_per_day=50, seed=1)
    uri = local_tracking_uri(home)
    lone, lone_training = _pipeline_run(home, uri, "p0", "train.max_steps=99")
    time.sleep(0.01)
    first, training = _pipeline_run(home, uri, "p1")
    time.sleep(0.01)
    reuse, reused = _pipeline_run(home, uri, "p2")
    assert reused == training and mlflow.MlflowClient(uri).get_run(training).data.tags["mlflow.parentRunId"] == first
    report = collect_garbage(home, RetentionConfig(keep_last_runs=1), Config().registry, uri)
    assert {first, lone, lone_training} <= set(report.mlflow_runs_deleted)
    assert training not in report.mlflow_runs_deleted and reuse not in report.mlflow_runs_deleted
    with tempfile.TemporaryDirectory() as tmp:
        assert mlflow.artifacts.download_artifacts(run_id=training, artifact_path="validation/data_docs.html",
                                                   dst_path=tmp, tracking_uri=uri)
