"""Strict validation of generated PyTorchJobs against the upstream CRD and the operator's webhook rules."""

from __future__ import annotations

import copy

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kube.names import is_dns1035_label, job_name_for, training_job_name
from ctpipe.components.lib.kube.pod import JobValidationError
from ctpipe.components.lib.kube.pytorchjob import build_pytorchjob, validate_pytorchjob
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch

LAUNCH = WorkerLaunch(job_name="ctpipe-train-abc", world_size=4, command=["python", "-m", "ctpipe.components.steps.train.worker"],
                      env={"OMP_NUM_THREADS": "1"}, deadline_seconds=7200)


def _job(*overrides: str, launch: WorkerLaunch = LAUNCH) -> dict:
    # The launcher passes the namespace it resolved (the step pod's own); these unit tests name one.
    return build_pytorchjob(load_config(overrides=["kubernetes.namespace=ctpipe", *overrides]).kubernetes, launch)


def _problems(job: dict) -> str:
    with pytest.raises(JobValidationError) as err:
        validate_pytorchjob(job)
    assert isinstance(err.value, ConfigError)  # a bad config: the CLI prints it and exits 2
    return str(err.value)


def test_generated_job_is_valid_and_shaped_as_the_operator_expects():
    job = _job("kubernetes.node_selector={accelerator: a100}",
               "kubernetes.tolerations=[{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]",
               "kubernetes.env_from_secrets={mlflow-credentials: [MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD]}",
               "kubernetes.image_pull_secrets=[ghcr-pull]")
    validate_pytorchjob(job)
    spec = job["spec"]
    assert set(spec) == {"pytorchReplicaSpecs", "runPolicy"}
    # The operator restarts nothing and stops the survivors of a failed job; the launcher restarts all ranks.
    assert spec["runPolicy"] == {"backoffLimit": 0, "activeDeadlineSeconds": 7200, "ttlSecondsAfterFinished": 3600,
                                 "cleanPodPolicy": "Running"}
    assert {r["restartPolicy"] for r in spec["pytorchReplicaSpecs"].values()} == {"Never"}
    master, worker = spec["pytorchReplicaSpecs"]["Master"], spec["pytorchReplicaSpecs"]["Worker"]
    assert master["replicas"] == 1 and worker["replicas"] == 3
    pod = worker["template"]["spec"]
    container = pod["containers"][0]
    assert container["name"] == "pytorch" and container["image"] == "ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["nodeSelector"] == {"accelerator": "a100"} and pod["tolerations"][0]["operator"] == "Exists"
    secret_env = [e for e in container["env"] if "valueFrom" in e]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in secret_env} == {"mlflow-credentials"}
    assert all("value" not in e for e in secret_env)
    assert {"name": "ctpipe-shared", "persistentVolumeClaim": {"claimName": "ctpipe-shared"}} in pod["volumes"]
    assert {"name": "ctpipe-shared", "mountPath": "/mnt/ctpipe"} in container["volumeMounts"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["imagePullSecrets"] == [{"name": "ghcr-pull"}]


def test_single_worker_has_no_worker_replicas_and_cpu_only_has_no_gpu():
    job = _job("kubernetes.worker_gpus=0", launch=WorkerLaunch(job_name="ctpipe-x", world_size=1, command=["python"]))
    validate_pytorchjob(job)
    assert list(job["spec"]["pytorchReplicaSpecs"]) == ["Master"]
    assert "nvidia.com/gpu" not in job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda j: j["spec"].__setitem__("ttlSecondsAfterFinished", 60), "spec.ttlSecondsAfterFinished: unknown field"),
        (lambda j: j["spec"].__setitem__("backoffLimit", 3), "spec.backoffLimit: unknown field"),
        (lambda j: j["spec"]["runPolicy"].__setitem__("activeDeadline", 5), "spec.runPolicy.activeDeadline: unknown field"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].__setitem__("gpu", 1),
         "containers[0].gpu: unknown field"),
        (lambda j: j["metadata"].__setitem__("ttl", 1), "metadata.ttl: unknown field"),
        (lambda j: j["spec"]["runPolicy"].__setitem__("backoffLimit", "3"), "spec.runPolicy.backoffLimit: expected integer, got string"),
        (lambda j: j["spec"]["runPolicy"].__setitem__("activeDeadlineSeconds", 1.5), "activeDeadlineSeconds: expected integer, got number"),
        (lambda j: j["spec"]["runPolicy"].__setitem__("ttlSecondsAfterFinished", 2**31), "out of range"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"].__setitem__("cpu", 1.5),
         "limits.cpu: expected an integer or a string"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["resources"]["limits"].__setitem__("memory", "16 GB"),
         "limits.memory: '16 GB' does not match"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"].__setitem__("nodeSelector", {"gpu": True}),
         "nodeSelector.gpu: expected string, got boolean"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["env"].append({"name": "PYTHONUNBUFFERED", "value": "0"}),
         "duplicate entry"),
        (lambda j: j["spec"].pop("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs: required field is missing"),
        (lambda j: j["metadata"].__setitem__("name", "Train_Job"), "is not a DNS-1035 label"),
        (lambda j: j["metadata"].__setitem__("name", "1-train"), "is not a DNS-1035 label"),
        (lambda j: j["metadata"].__setitem__("name", "a" * 64), "is not a DNS-1035 label"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0].__setitem__("name", "trainer"),
         "Master.template.spec.containers: one container must be named 'pytorch'"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].__setitem__("image", ""),
         "Worker.template.spec.containers[0].image: every container needs an image"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].__setitem__("replicas", 2), "Master must have exactly 1 replica"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"].__setitem__("Chief", copy.deepcopy(j["spec"]["pytorchReplicaSpecs"]["Worker"])),
         "replica type 'Chief' is not allowed"),
        (lambda j: j["spec"]["pytorchReplicaSpecs"].pop("Master"), "ctpipe needs a Master replica"),
        (lambda j: (j["spec"]["pytorchReplicaSpecs"].pop("Worker"), j["spec"].__setitem__("elasticPolicy", {"minReplicas": 1})),
         "spec.elasticPolicy: needs a Worker"),
    ],
)
def test_bad_jobs_are_refused_with_the_field_named(mutate, expected):
    job = _job()
    mutate(job)
    assert expected in _problems(job)


def test_preserve_unknown_fields_and_free_maps_stay_open():
    job = _job()
    job["metadata"]["labels"]["team"] = "ml"  # labels: a map of strings
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["metadata"]["annotations"]["x"] = "y"
    validate_pytorchjob(job)


def test_gpus_per_pod_above_one_is_refused():
    with pytest.raises(ConfigError, match="kubernetes.worker_gpus"):
        _job("kubernetes.worker_gpus=2")


def test_job_names_are_deterministic_dns1035_labels():
    run_id = "8F0C1A2E-5d1b-4c8e-9a9e-0123456789AB"
    first, second = job_name_for(run_id), job_name_for(run_id)
    assert first == second and is_dns1035_label(first) and len(first) <= 48
    assert job_name_for(run_id, "train") != job_name_for(run_id, "eval")
    assert job_name_for(run_id) != job_name_for(run_id.lower() + "x")
    assert training_job_name(run_id) == first and training_job_name(first) == first
    assert is_dns1035_label(training_job_name("123_weird name!" * 10))
