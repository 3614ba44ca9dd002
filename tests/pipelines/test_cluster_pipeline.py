"""The compiled pipeline carries the kfp-kubernetes settings from config, and no secret values."""

from __future__ import annotations

import yaml

from ctpipe.pipelines.compile import compile_pipeline

SECRET_VALUE = "hunter2-do-not-leak-7f3a9"
OVERRIDES = [
    "kubernetes.env_from_secrets={ctpipe-mlflow-client: [MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD], "
    "ctpipe-object-store: [AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY]}",
    "kubernetes.step_node_selector={node-pool: cpu}",
    "kubernetes.step_tolerations=[{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]",
    "kubernetes.shared_pvc=ctpipe-shared",
    "kubernetes.step_memory_limit=6Gi",
    "kubernetes.image_pull_secrets=[ghcr-pull]",
]


def test_compiled_pipeline_has_platform_spec_and_no_secret_values(tmp_path, monkeypatch):
    # Values present in the compiling environment must never reach the spec.
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET_VALUE)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
    out = compile_pipeline(tmp_path / "pipeline.yaml", None, OVERRIDES, image=None)
    text = out.read_text()
    assert SECRET_VALUE not in text
    pipeline_spec, platform = yaml.safe_load_all(text)
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert set(executors) == set(pipeline_spec["deploymentSpec"]["executors"])
    for name, spec in executors.items():
        secrets = {s["secretName"]: [k["envVar"] for k in s["keyToEnv"]] for s in spec["secretAsEnv"]}
        assert secrets == {
            "ctpipe-mlflow-client": ["MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"],
            "ctpipe-object-store": ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"],
        }, name
        assert spec["nodeSelector"]["labels"] == {"node-pool": "cpu"}
        assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
        assert spec["pvcMount"][0]["mountPath"] == "/mnt/ctpipe"
        assert spec["pvcMount"][0]["pvcNameParameter"]["runtimeValue"]["constant"] == "ctpipe-shared"
        assert "securityContext" not in spec  # the image's USER is non-root; older KFP backends lack the field
        assert [s["secretName"] for s in spec["imagePullSecret"]] == ["ghcr-pull"]
    resources = {n: e["container"]["resources"] for n, e in pipeline_spec["deploymentSpec"]["executors"].items()}
    assert resources["exec-train"]["resourceCpuLimit"] == "1"  # the launcher only follows the job
    assert resources["exec-evaluate"]["resourceMemoryLimit"] == "6Gi"


def test_without_a_shared_pvc_no_volume_is_mounted(tmp_path):
    out = compile_pipeline(tmp_path / "p.yaml", None, ["kubernetes.shared_pvc=null"], image=None)
    _, platform = yaml.safe_load_all(out.read_text())
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    assert all("pvcMount" not in spec for spec in executors.values())
