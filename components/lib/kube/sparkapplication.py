"""Build a Kubeflow Spark Operator SparkApplication (sparkoperator.k8s.io/v1beta2) and validate it before submission.

The operator (2.5) runs ``spark-submit`` in cluster mode: Spark creates the driver pod ``<app>-driver``, and the
driver creates its executor pods. Every pod setting ctpipe needs (the non-root security context, the shared
volume, a writable /tmp, env, placement) is in the driver's and executors' pod ``template``: the operator hands
templates to ``spark-submit`` as pod template files, so the pods come out right without the operator's
mutating webhook (its ``env``/``volumeMounts``/``securityContext`` fields would need it). Retries are the
launcher's (``restartPolicy: Never``): like the train step's jobs, a failed application is created again whole,
and a driver exiting 2 (bad data or config) never is.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from typing import Any

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.kube import pod as kube_pod
from ctpipe.components.lib.kube.crds import SPARKAPPLICATION_CRD, crd_schema
from ctpipe.components.lib.kube.images import pull_policy
from ctpipe.components.lib.kube.names import DNS1123_LABEL, ENV_NAME, MAX_NAME, is_dns1035_label, job_name_for
from ctpipe.components.lib.kube.schema import validate_strict

GROUP = "sparkoperator.k8s.io"
VERSION = "v1beta2"
PLURAL = "sparkapplications"
KIND = "SparkApplication"
CRD_NAME = f"{PLURAL}.{GROUP}"
# The Spark of containers/spark.Dockerfile: 4.1 has the DataSketches aggregates validation needs.
SPARK_VERSION = "4.1.1"
MIN_SPARK_VERSION = (4, 1)
# Spark's container names; the operator passes them as spark.kubernetes.{driver,executor}.podTemplateContainerName.
DRIVER_CONTAINER = "spark-kubernetes-driver"
EXECUTOR_CONTAINER = "spark-kubernetes-executor"
# In the image (containers/spark.Dockerfile): runs `python -m MODULE ARGS` for spark-submit, which takes a file.
ENTRY_FILE = "/opt/ctpipe/spark_entry.py"
# Labels the operator and Spark put on the application's pods (spark-operator v2.5.2 pkg/common/spark.go).
LABEL_APP_NAME = "sparkoperator.k8s.io/app-name"
LABEL_SUBMISSION_ID = "sparkoperator.k8s.io/submission-id"
LABEL_SPARK_ROLE = "spark-role"
# Terminal application states (v2.5.2 pkg/util IsTerminated); the others pass on their way there.
COMPLETED, FAILED = "COMPLETED", "FAILED"
VALIDATOR_LABELS = {"app.kubernetes.io/name": "ctpipe", "app.kubernetes.io/component": "validate-data"}
# sparkConf keys the operator's webhook refuses (v2.5.2 internal/webhook/sparkconf_validator.go).
DENIED_SPARK_CONF = (
    "spark.master", "spark.kubernetes.driver.master", "spark.kubernetes.container.image",
    "spark.kubernetes.driver.container.image", "spark.kubernetes.executor.container.image",
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.authenticate.executor.serviceAccountName", "spark.kubernetes.authenticate.oauthTokenFile",
    "spark.kubernetes.authenticate.oauthToken", "spark.kubernetes.authenticate.driver.oauthTokenFile",
    "spark.kubernetes.authenticate.driver.oauthToken", "spark.kubernetes.authenticate.executor.oauthTokenFile",
    "spark.kubernetes.authenticate.executor.oauthToken",
)
# What keeps the driver's Role to its executor pods (manifests/base/rbac-spark-driver.yaml): no claims of its own
# (the data is on the shared volume or in an object store), no ConfigMap for the executors (their configuration
# comes from the driver when they register), and its service (created by the operator's spark-submit, owned by
# the driver pod) left to the garbage collector with the driver pod rather than deleted by the driver.
SPARK_CONF = {
    "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
    "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
    "spark.kubernetes.executor.disableConfigMap": "true",
    "spark.kubernetes.driver.service.deleteOnTermination": "false",
}


@dataclass
class SparkLaunch:
    """What the application runs: ``python -m MODULE ARGS`` on the driver, named for a launch, with a deadline."""

    # Deterministic per pipeline run, so a retried step re-attaches to the same application.
    job_name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    deadline_seconds: int = 3600


def application_name(launch_name: str) -> str:
    """The application's name: a DNS-1035 label of at most 45 characters (its driver pod is ``<name>-driver``)."""
    if launch_name.startswith("ctpipe-validate-") and is_dns1035_label(launch_name) and len(launch_name) <= 45:
        return launch_name
    return job_name_for(launch_name, "validate")


def driver_selector(name: str) -> str:
    """Label selector of the application's driver pod."""
    return f"{LABEL_APP_NAME}={name},{LABEL_SPARK_ROLE}=driver"


def pods_selector(name: str) -> str:
    """Label selector of every pod of the application (driver and executors)."""
    return f"{LABEL_APP_NAME}={name}"


def app_state(app: dict[str, Any]) -> str:
    """The operator's ``status.applicationState.state``; ``NEW`` before the operator has seen the application."""
    return ((app.get("status") or {}).get("applicationState") or {}).get("state") or "NEW"


def failure_reason(app: dict[str, Any]) -> str:
    """The state and the error message the operator recorded."""
    state = (app.get("status") or {}).get("applicationState") or {}
    return f"{state.get('state') or 'NEW'}: {state.get('errorMessage') or 'no message'}"


def module_arguments(command: list[str]) -> list[str]:
    """``python -m MODULE ARGS`` as the entry file's arguments ``[MODULE, *ARGS]`` (spark-submit runs a file)."""
    if len(command) >= 3 and os.path.basename(command[0]).startswith("python") and command[1] == "-m":
        return list(command[2:])
    raise kube_pod.JobValidationError(
        f"a SparkApplication runs its driver as 'python -m MODULE ...' through {ENTRY_FILE}, got {command[:3]}"
    )


def _template(kube: KubernetesConfig, launch: SparkLaunch, container: str, *, api_access: bool) -> dict[str, Any]:
    """A Spark pod template: non-root, the shared volume, a writable /tmp, env (kubernetes.spark_env_from_secrets by
    reference, never the MLflow credentials: the Spark pods do not log), placement."""
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    if kube.shared_pvc:
        mounts.append({"name": kube_pod.SHARED_VOLUME, "mountPath": kube.shared_mount_path})
        volumes.append({"name": kube_pod.SHARED_VOLUME, "persistentVolumeClaim": {"claimName": kube.shared_pvc}})
    spec: dict[str, Any] = {
        "securityContext": copy.deepcopy(kube_pod.POD_SECURITY_CONTEXT),
        "containers": [{
            "name": container,
            "env": kube_pod.container_env(replace(kube, env_from_secrets=kube.spark_env_from_secrets), launch),
            "volumeMounts": mounts,
            "securityContext": copy.deepcopy(kube_pod.CONTAINER_SECURITY_CONTEXT),
        }],
        "volumes": volumes,
        # The driver creates its executors through the API; the executors never call it.
        "automountServiceAccountToken": api_access,
    }
    if kube.step_node_selector:
        spec["nodeSelector"] = dict(sorted(kube.step_node_selector.items()))
    if kube.step_tolerations:
        spec["tolerations"] = [dict(t) for t in kube.step_tolerations]
    # An Istio sidecar keeps a finished pod Running (the operator would never see the driver end).
    return {"metadata": {"annotations": {"sidecar.istio.io/inject": "false"}}, "spec": spec}


def build_sparkapplication(kube: KubernetesConfig, launch: SparkLaunch) -> dict[str, Any]:
    """The SparkApplication for ``launch``: the driver and ``kubernetes.spark_executor_instances`` executors."""
    image = kube.spark_image
    app: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "metadata": {
            "name": application_name(launch.job_name),
            "namespace": kube.namespace,
            "labels": dict(VALIDATOR_LABELS),
            "annotations": {kube_pod.LAUNCH_ANNOTATION: launch.job_name},
        },
        "spec": {
            "type": "Python",
            "mode": "cluster",
            "sparkVersion": SPARK_VERSION,
            "image": image,
            "imagePullPolicy": pull_policy(image),
            "mainApplicationFile": f"local://{ENTRY_FILE}",
            "arguments": module_arguments(launch.command),
            "sparkConf": dict(SPARK_CONF),
            "restartPolicy": {"type": "Never"},
            # The operator deletes a finished application (and with it its driver pod) after this long.
            "timeToLiveSeconds": kube.ttl_seconds_after_finished,
            "driver": {
                "cores": kube.spark_driver_cores,
                "coreLimit": str(kube.spark_driver_cores),
                "memory": kube.spark_driver_memory,
                "serviceAccount": kube.spark_service_account,
                "template": _template(kube, launch, DRIVER_CONTAINER, api_access=True),
            },
            "executor": {
                "instances": kube.spark_executor_instances,
                "cores": kube.spark_executor_cores,
                "coreLimit": str(kube.spark_executor_cores),
                "memory": kube.spark_executor_memory,
                "deleteOnTermination": True,
                "template": _template(kube, launch, EXECUTOR_CONTAINER, api_access=False),
            },
        },
    }
    if kube.image_pull_secrets:
        app["spec"]["imagePullSecrets"] = list(kube.image_pull_secrets)
    return app


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split("-")[0].split(".")[:2])
    except ValueError:
        return ()


def admission_violations(app: dict[str, Any]) -> list[str]:
    """The operator's webhook rules (PROVENANCE.md), the API server's name rules, and ctpipe's own."""
    problems: list[str] = []
    meta = app.get("metadata") or {}
    name, namespace = str(meta.get("name", "")), str(meta.get("namespace", ""))
    if not is_dns1035_label(name):
        problems.append(f"metadata.name: {name!r} is not a DNS-1035 label")
    elif len(f"{name}-driver") > MAX_NAME:
        problems.append(f"metadata.name: {name!r} is too long: its driver pod '{name}-driver' would exceed 63 characters")
    if not (len(namespace) <= 63 and DNS1123_LABEL.match(namespace)):
        problems.append(f"metadata.namespace: {namespace!r} is not a DNS-1123 label")
    spec = app.get("spec") or {}
    version = _version(str(spec.get("sparkVersion", "")))
    if version < MIN_SPARK_VERSION:
        problems.append(f"spec.sparkVersion: {spec.get('sparkVersion')!r}; ctpipe needs Spark >= 4.1 (DataSketches)")
    for key, value in (spec.get("sparkConf") or {}).items():
        if key in DENIED_SPARK_CONF:
            problems.append(f"spec.sparkConf.{key}: refused by the operator's webhook (set by the operator or the CRD)")
        if key == "spark.kubernetes.namespace" and value != namespace:
            problems.append(f"spec.sparkConf.{key}: must equal the application's namespace {namespace!r}")
    if spec.get("nodeSelector") and any((spec.get(r) or {}).get("nodeSelector") for r in ("driver", "executor")):
        problems.append("spec.nodeSelector: cannot be set on the application and on the driver/executor at once")
    if (spec.get("restartPolicy") or {}).get("type") != "Never":
        problems.append("spec.restartPolicy.type: must be Never (the launcher re-creates a failed application)")
    for role, container in (("driver", DRIVER_CONTAINER), ("executor", EXECUTOR_CONTAINER)):
        containers = (((spec.get(role) or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if [c.get("name") for c in containers] != [container]:
            problems.append(f"spec.{role}.template.spec.containers: must be exactly one container named {container!r}")
        for env in (containers[0].get("env") or []) if containers else []:
            if not ENV_NAME.match(str(env.get("name", ""))):
                problems.append(f"spec.{role}.template: env {env.get('name')!r} is not a valid variable name")
    return problems


def validate_sparkapplication(app: dict[str, Any]) -> None:
    """Refuse an application that strict validation against the operator's v2.5.2 CRD or its admission rules would
    reject; list every problem."""
    problems = validate_strict(app, crd_schema(SPARKAPPLICATION_CRD, VERSION)) + admission_violations(app)
    if app.get("apiVersion") != f"{GROUP}/{VERSION}" or app.get("kind") != KIND:
        problems.append(f"apiVersion/kind: expected {GROUP}/{VERSION} {KIND}")
    kube_pod.refuse_if_invalid(KIND, app, problems)
