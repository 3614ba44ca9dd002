"""What both Kubeflow job kinds share: the trainer pod (env, resources, volumes, placement, a non-root
security context), the job's metadata, and the refusal of an invalid job.

Nothing here knows of training: a job builder needs only what ``RankLaunch`` names (training's
``WorkerLaunch`` is one), so ``ctpipe.components.lib.kube`` imports nothing from ``ctpipe.components.steps.train``.
"""

from __future__ import annotations

from typing import Any, Protocol

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.errors import ConfigError

SHARED_VOLUME = "ctpipe-shared"
# Non-root uid/gid of the ctpipe images (containers/*.Dockerfile).
IMAGE_UID = 10001


class RankLaunch(Protocol):
    """What a job builder reads from a launch: the same command on ``world_size`` ranks, with env and a deadline."""

    job_name: str
    world_size: int
    command: list[str]
    env: dict[str, str]
    deadline_seconds: int


class JobValidationError(ConfigError):
    """The generated job would be rejected by the API server or the operator's webhook."""


def container_env(kube: KubernetesConfig, launch: RankLaunch) -> list[dict[str, Any]]:
    """The trainer container's env: unbuffered output, the launch's variables, then config secrets by reference."""
    env = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    env += [{"name": k, "value": str(v)} for k, v in sorted(launch.env.items()) if k != "PYTHONUNBUFFERED"]
    for secret, keys in sorted(kube.env_from_secrets.items()):
        # Only the secret's name and key go into the job; the kubelet resolves the value in the pod.
        env += [{"name": key, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}} for key in keys]
    return env


def container_resources(kube: KubernetesConfig) -> dict[str, Any]:
    """Requests and limits of one trainer container (one rank) from kubernetes.worker_*."""
    limits: dict[str, Any] = {"cpu": kube.worker_cpu, "memory": kube.worker_memory}
    if kube.worker_gpus:
        limits["nvidia.com/gpu"] = kube.worker_gpus
    return {"requests": {"cpu": kube.worker_cpu, "memory": kube.worker_memory}, "limits": limits}


# Both job kinds run the worker as the image's non-root user, with nothing it does not need.
POD_SECURITY_CONTEXT = {
    "runAsNonRoot": True,
    "runAsUser": IMAGE_UID,
    "runAsGroup": IMAGE_UID,
    "fsGroup": IMAGE_UID,
    # Chown the shared volume only when its root does not match, not every file at every pod start.
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
}


TRAINER_LABELS = {"app.kubernetes.io/name": "ctpipe", "app.kubernetes.io/component": "trainer"}
# The launch (KFP run id) a job was created for: with the labels, how a retried step knows the job is its own.
LAUNCH_ANNOTATION = "ctpipe.io/launch-name"


def check_one_gpu_per_process(kube: KubernetesConfig, unit: str) -> None:
    """The worker runs one process per pod (node), so more than one GPU there would sit idle."""
    if kube.worker_gpus > 1:
        raise JobValidationError(
            f"invalid config value for 'kubernetes.worker_gpus': {kube.worker_gpus}; the worker runs one process "
            f"per {unit}, so each {unit} can use at most 1 GPU. Use train.workers to scale out (one {unit} per GPU)."
        )


def worker_volumes(kube: KubernetesConfig) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) of a worker: shared memory, a writable /tmp and the shared PVC."""
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [
        # NCCL and DataLoader workers need more shared memory than the runtime's 64 MiB default.
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "tmp", "emptyDir": {}},
    ]
    if kube.shared_pvc:
        mounts.append({"name": SHARED_VOLUME, "mountPath": kube.shared_mount_path})
        volumes.append({"name": SHARED_VOLUME, "persistentVolumeClaim": {"claimName": kube.shared_pvc}})
    return mounts, volumes


def add_placement(pod_spec: dict[str, Any], kube: KubernetesConfig) -> None:
    """Image pull secrets, node selector and tolerations from the config, set only when configured."""
    if kube.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in kube.image_pull_secrets]
    if kube.node_selector:
        pod_spec["nodeSelector"] = dict(sorted(kube.node_selector.items()))
    if kube.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in kube.tolerations]


def job_metadata(kube: KubernetesConfig, launch: RankLaunch, name: str) -> dict[str, Any]:
    """A job's metadata: its name in the namespace, the trainer labels, and the launch it was made for."""
    return {
        "name": name,
        "namespace": kube.namespace,
        "labels": dict(TRAINER_LABELS),
        "annotations": {LAUNCH_ANNOTATION: launch.job_name},
    }


def refuse_if_invalid(kind: str, job: dict[str, Any], problems: list[str]) -> None:
    """JobValidationError listing every problem of ``job`` (a ``kind``), so none is submitted half-checked."""
    if problems:
        raise JobValidationError(
            f"the {kind} {((job.get('metadata') or {}).get('name'))!r} is invalid and was not submitted: "
            + "; ".join(problems)
            + ". Fix the kubernetes.* / train.* config values that produce these fields."
        )
