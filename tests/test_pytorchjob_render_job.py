"""`ctpipe render-job` prints the validated PyTorchJob with placeholders, or exits 2 with the reason."""

from __future__ import annotations

import yaml

from components.config import load_config
from components.kube.pytorchjob import validate_pytorchjob
from components.kube.render import render_pytorchjob
from pipelines.cli import main


def test_render_job_prints_the_job_with_placeholders(capsys):
    assert main(["render-job", "--set", "train.workers=4", "--set", "kubernetes.worker_gpus=0"]) == 0
    out = capsys.readouterr().out
    job = yaml.safe_load(out)
    assert job["kind"] == "PyTorchJob" and job["metadata"]["name"] == "ctpipe-train-${PIPELINE_RUN_ID}"
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    argv = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:3] == ["python", "-m", "components.training.worker"]
    assert "${MLFLOW_RUN_ID}" in argv and "${MLFLOW_TRACKING_URI}" in argv
    # The step's artifact paths are staged onto the shared volume the pods mount.
    assert argv[argv.index("--snapshot") + 1].startswith("/mnt/ctpipe/jobs/")
    assert "/tmp/ctpipe-render-" not in out


def test_rendered_job_validates_once_placeholders_are_filled():
    job = render_pytorchjob(load_config(overrides=["kubernetes.namespace=ml-team"]))
    job["metadata"]["name"] = "ctpipe-train-0123"
    validate_pytorchjob(job)


def test_render_job_without_shared_pvc_shows_step_path_placeholders(capsys):
    assert main(["render-job", "--set", "kubernetes.shared_pvc=null"]) == 0
    argv = yaml.safe_load(capsys.readouterr().out)["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert "${SNAPSHOT_DIR}" in argv and "${CHECKPOINT_DIR}" in argv


def test_bad_config_exits_2_with_the_reason(capsys):
    assert main(["render-job", "--set", "kubernetes.namespace=Team_A"]) == 2
    err = capsys.readouterr().err
    assert "'kubernetes.namespace': 'Team_A' is not a DNS-1123 label" in err
    assert main(["render-job", "--set", "kubernetes.worker_gpus=4"]) == 2
    assert "kubernetes.worker_gpus" in capsys.readouterr().err
    assert main(["render-job", "--set", "kubernetes.worker_memory=lots"]) == 2
    assert "not a Kubernetes quantity" in capsys.readouterr().err
