"""The cluster path gives the step what a local validation gives it: the same result and snapshot (the driver here
runs ctpipe's local engine on the shared volume), and the KFP adapter takes that path for validation.engine=spark
in a cluster pipeline, finding the API server as a step pod would (its kubeconfig)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from kfp.dsl import HTML, Dataset, Markdown

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.component import validate_data as validate_component
from ctpipe.components.steps.validate_data.on_spark_cluster import validate_on_spark_cluster
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.components.steps.validate_data.test_spark_cluster import NS, STUB, _config, _launcher
from tests.fakes.k8s_api import FakeKubeAPI
from tests.fakes.spark_driver_stub import MODE_ENV
from tests.fakes.spark_operator import SparkOperator

RUN = "5e6f7a8b-aaaa-bbbb-cccc-0123456789ab"


def _files(root: Path) -> dict[str, str]:
    """Each file under ``root`` -> its SHA-256 (validation.json: its verdict without the timings)."""
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.name == "validation.json":
            verdict = json.loads(data)
            verdict.pop("seconds")
            data = json.dumps(verdict, sort_keys=True).encode()
        out[str(path.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


@pytest.mark.slow  # the local engine twice (GX's import is most of it)
def test_the_cluster_step_gives_the_outputs_of_a_local_validation(tmp_path):
    data = tmp_path / "pvc" / "data"
    write_demo_data(data, days=2, rows_per_day=150, seed=4)
    config = _config(tmp_path, "data.key=customer_id")
    # The reference is the local engine's (the stub driver runs it too): Spark's own parity is test_spark_parity.py.
    local = validate_data(str(data), replace(config, validation=replace(config.validation, engine="local")),
                          snapshot_dir=str(tmp_path / "local" / "snapshot"),
                          data_docs_path=str(tmp_path / "local" / "docs.html"),
                          report_path=str(tmp_path / "local" / "report.md"), tracking_uri="", mlflow_run_id="")
    step = tmp_path / "step"
    with FakeKubeAPI() as fake:
        SparkOperator(extra_env={MODE_ENV: "local"}).attach(fake)
        result = validate_on_spark_cluster(
            str(data), config, snapshot_dir=str(step / "snapshot"), data_docs_path=str(step / "docs.html"),
            report_path=str(step / "report.md"), tracking_uri="", mlflow_run_id=RUN, module=STUB,
            launcher=_launcher(fake, config, []))
    assert (result.fingerprint, result.rows, result.warnings) == (local.fingerprint, local.rows, local.warnings)
    assert _files(step / "snapshot") == _files(tmp_path / "local" / "snapshot")
    assert "<html" in (step / "docs.html").read_text() and (step / "report.md").read_text()


def test_the_kfp_step_runs_a_spark_application_for_the_spark_engine_on_a_cluster(tmp_path, monkeypatch):
    (tmp_path / "pvc" / "data").mkdir(parents=True)
    config = _config(tmp_path)
    with FakeKubeAPI() as fake:
        operator = SparkOperator(extra_env={MODE_ENV: "pass"}).attach(fake)
        kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                      "clusters": [{"name": "k", "cluster": {"server": fake.url}}],
                      "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u", "namespace": NS}}],
                      "users": [{"name": "u", "user": {"token": "t"}}]}
        (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
        # The client read $KUBECONFIG when it was first imported: point its default there too.
        monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "kubeconfig"))
        monkeypatch.setattr("ctpipe.components.steps.validate_data.on_spark_cluster.DRIVER_MODULE", STUB)
        artifacts = {kind: kind(name=name, uri=str(tmp_path / "artifacts" / name), metadata={})
                     for kind, name in ((Dataset, "snapshot"), (HTML, "data_docs"), (Markdown, "validation_report"))}
        (tmp_path / "artifacts" / "snapshot").mkdir(parents=True)
        out = validate_component.python_func(
            data_uri=str(tmp_path / "pvc" / "data"), config_json=config.to_json(), mlflow_tracking_uri="",
            mlflow_run_id=RUN, snapshot=artifacts[Dataset], data_docs=artifacts[HTML],
            validation_report=artifacts[Markdown])
    assert out.fingerprint == "stub-fingerprint" and out.warnings == 1
    assert artifacts[Dataset].metadata["rows"] == {"train": 8, "val": 1, "test": 1}
    assert (tmp_path / "artifacts" / "snapshot" / "train.parquet").is_file()
    ((app, _, _),) = operator.record
    assert app["kind"] == "SparkApplication" and app["metadata"]["namespace"] == NS
    assert load_config(overrides=[]).validation.engine == "local"  # the default stays the step's own process
