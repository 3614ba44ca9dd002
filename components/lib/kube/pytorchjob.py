"""Build a Kubeflow PyTorchJob (kubeflow.org/v1) from the config and validate it before submission."""

from __future__ import annotations

import copy
import os
from typing import Any

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.kube import pod as trainer_pod
from ctpipe.components.lib.kube.crds import PYTORCHJOB_CRD, crd_schema
from ctpipe.components.lib.kube.images import pull_policy
from ctpipe.components.lib.kube.names import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    ENV_NAME,
    LABEL_VALUE,
    is_dns1035_label,
    training_job_name,
)
from ctpipe.components.lib.kube.pod import RankLaunch
from ctpipe.components.lib.kube.schema import validate_strict

GROUP = "kubeflow.org"
VERSION = "v1"
PLURAL = "pytorchjobs"
KIND = "PyTorchJob"
CONTAINER = "pytorch"  # the operator injects MASTER_ADDR/PORT, WORLD_SIZE, RANK into this container
REPLICA_TYPES = ("Master", "Worker")
# The operator's pod labels (training-operator v1.9) used to find a job's pods.
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"


def job_selector(job_name: str) -> str:
    """Label selector of every pod of a PyTorchJob."""
    return f"{LABEL_JOB_NAME}={job_name}"


def master_selector(job_name: str) -> str:
    """Label selector of a PyTorchJob's Master pod, where rank 0 runs (the operator lower-cases the type)."""
    return f"{job_selector(job_name)},{LABEL_REPLICA_TYPE}=master"


def _container_command(command: list[str]) -> list[str]:
    # The step's own interpreter path (e.g. /opt/venv/bin/python) need not exist in the trainer image;
    # both images put their venv first on PATH, so "python" is the portable spelling.
    if command and os.path.basename(command[0]).startswith("python"):
        return ["python", *command[1:]]
    return list(command)


def _pod_template(kube: KubernetesConfig, launch: RankLaunch) -> dict[str, Any]:
    mounts, volumes = trainer_pod.worker_volumes(kube)
    container = {
        "name": CONTAINER,
        "image": kube.trainer_image,
        "imagePullPolicy": pull_policy(kube.trainer_image),
        "command": _container_command(launch.command),
        "env": trainer_pod.container_env(kube, launch),
        "resources": trainer_pod.container_resources(kube),
        "volumeMounts": mounts,
        "securityContext": dict(trainer_pod.CONTAINER_SECURITY_CONTEXT),
    }
    spec: dict[str, Any] = {
        "containers": [container],
        "volumes": volumes,
        # Workers never call the Kubernetes API.
        "automountServiceAccountToken": False,
        "securityContext": dict(trainer_pod.POD_SECURITY_CONTEXT),
    }
    trainer_pod.add_placement(spec, kube)
    return {
        "metadata": {
            "labels": dict(trainer_pod.TRAINER_LABELS),
            # An Istio sidecar keeps a finished pod Running and can block the rendezvous port.
            "annotations": {"sidecar.istio.io/inject": "false"},
        },
        "spec": spec,
    }


def build_pytorchjob(kube: KubernetesConfig, launch: RankLaunch) -> dict[str, Any]:
    """The PyTorchJob for ``launch``: Master 1 + Workers world_size-1, runPolicy from config and launch; a failed
    rank fails the job (no restart in place)."""
    trainer_pod.check_one_gpu_per_process(kube, "pod")
    name = training_job_name(launch.job_name)
    template = _pod_template(kube, launch)
    # Never, and no operator retries: with a static rendezvous a rank restarted alone (OnFailure) finds its
    # peers blocked in a collective of the old group until the process-group timeout. One failed rank fails
    # the job; the launcher then restarts the whole job, every rank together, from the latest checkpoint.
    replicas: dict[str, Any] = {"Master": {"replicas": 1, "restartPolicy": "Never", "template": template}}
    if launch.world_size > 1:
        replicas["Worker"] = {
            "replicas": launch.world_size - 1,
            "restartPolicy": "Never",
            "template": copy.deepcopy(template),
        }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": trainer_pod.job_metadata(kube, launch, name),
        "spec": {
            "pytorchReplicaSpecs": replicas,
            "runPolicy": {
                "backoffLimit": 0,  # restarts are the launcher's (kubernetes.backoff_limit), of all ranks at once
                "activeDeadlineSeconds": launch.deadline_seconds,
                "ttlSecondsAfterFinished": kube.ttl_seconds_after_finished,
                # All would let the operator delete the failed pod before the launcher reads its exit code and
                # log tail (an exit-2 failure would be restarted, the message would lack its log): the job keeps
                # its terminated pods and the launcher deletes the job once it has read them (kubeflow.py).
                "cleanPodPolicy": "Running" if kube.clean_pod_policy == "All" else kube.clean_pod_policy,
            },
        },
    }


def webhook_violations(job: dict[str, Any]) -> list[str]:
    """The training-operator v1.9 admission rules the CRD schema does not express (PROVENANCE.md)."""
    problems: list[str] = []
    name = (job.get("metadata") or {}).get("name", "")
    if not isinstance(name, str) or not is_dns1035_label(name):
        problems.append(
            f"metadata.name: {name!r} is not a DNS-1035 label (lower-case letters, digits and '-', "
            "starting with a letter, ending with a letter or digit, at most 63 characters)"
        )
    spec = job.get("spec") or {}
    replica_specs = spec.get("pytorchReplicaSpecs") or {}
    if not isinstance(replica_specs, dict) or not replica_specs:
        return problems + ["spec.pytorchReplicaSpecs: must define Master and/or Worker replicas"]
    for rtype, rspec in replica_specs.items():
        where = f"spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in REPLICA_TYPES:
            problems.append(f"{where}: replica type {rtype!r} is not allowed; only Master and Worker")
        if not isinstance(rspec, dict):
            continue
        if rtype == "Master" and rspec.get("replicas", 1) != 1:
            problems.append(f"{where}.replicas: Master must have exactly 1 replica, got {rspec.get('replicas')!r}")
        containers = ((rspec.get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers:
            problems.append(f"{where}.template.spec.containers: at least one container is required")
        for index, container in enumerate(containers):
            if not isinstance(container, dict) or not container.get("image"):
                problems.append(f"{where}.template.spec.containers[{index}].image: every container needs an image")
        if containers and not any(isinstance(c, dict) and c.get("name") == CONTAINER for c in containers):
            problems.append(f"{where}.template.spec.containers: one container must be named {CONTAINER!r}")
    if spec.get("elasticPolicy") is not None and "Worker" not in replica_specs:
        problems.append("spec.elasticPolicy: needs a Worker replica spec")
    return problems


def apiserver_violations(job: dict[str, Any]) -> list[str]:
    """Name rules the API server enforces on the pods it would create (not in the CRD schema)."""
    problems: list[str] = []
    namespace = (job.get("metadata") or {}).get("namespace", "")
    if not (isinstance(namespace, str) and len(namespace) <= 63 and DNS1123_LABEL.match(namespace)):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    for rtype, rspec in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        pod = ((rspec or {}).get("template") or {}).get("spec") or {}
        where = f"spec.pytorchReplicaSpecs.{rtype}.template.spec"
        for key, value in (pod.get("nodeSelector") or {}).items():
            if not (isinstance(value, str) and len(value) <= 63 and LABEL_VALUE.match(value)):
                problems.append(f"{where}.nodeSelector.{key}: {value!r} is not a valid label value")
        for volume in pod.get("volumes") or []:
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName", "")
            if "persistentVolumeClaim" in volume and not DNS1123_SUBDOMAIN.match(str(claim)):
                problems.append(f"{where}.volumes.{volume.get('name')}: claim name {claim!r} is not a DNS-1123 subdomain")
        for container in pod.get("containers") or []:
            for env in container.get("env") or []:
                name = env.get("name", "")
                if not ENV_NAME.match(str(name)):
                    problems.append(f"{where}.containers.{container.get('name')}.env: {name!r} is not a valid variable name")
                secret = ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name")
                if secret is not None and not DNS1123_SUBDOMAIN.match(str(secret)):
                    problems.append(f"{where}.containers.{container.get('name')}.env.{name}: secret name {secret!r} is not a DNS-1123 subdomain")
    return problems


def validate_pytorchjob(job: dict[str, Any]) -> None:
    """Refuse a job that strict CRD validation or the operator's webhook would reject; list every problem."""
    problems = validate_strict(job, crd_schema(PYTORCHJOB_CRD, VERSION))
    problems += webhook_violations(job)
    problems += apiserver_violations(job)
    if job.get("apiVersion") != f"{GROUP}/{VERSION}" or job.get("kind") != KIND:
        problems.append(f"apiVersion/kind: expected {GROUP}/{VERSION} {KIND}")
    # ctpipe's own rule: logs are streamed from the Master pod, and rank 0 runs there.
    if "Master" not in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}):
        problems.append("spec.pytorchReplicaSpecs.Master: ctpipe needs a Master replica (rank 0)")
    trainer_pod.refuse_if_invalid(KIND, job, problems)
