"""The namespace a training job is created in: the one the train step's pod runs in.

In multi-user Kubeflow every profile is a namespace, and a pipeline run's pods run in the profile's namespace
with its service account. That account's RBAC (``manifests/``) and the shared volume the step stages data
on both belong to that namespace, so a job sent elsewhere gets 403, or runs on a different volume with the
same name. A pod learns its namespace from the file the kubelet mounts beside the service-account token
(KFP's own launcher reads the same file).
"""

from __future__ import annotations

import os
from pathlib import Path

from ctpipe.components.lib.errors import ConfigError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def pod_namespace() -> str | None:
    """The namespace this process's pod runs in, or None outside a pod (no service-account mount)."""
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or None
    except OSError:
        return None


def kubeconfig_namespace() -> str | None:
    """The namespace of the kubeconfig's current context (``ctpipe train`` from a workstation), or None."""
    try:
        from kubernetes import config as kube_config

        _, active = kube_config.list_kube_config_contexts(config_file=os.environ.get("KUBECONFIG") or None)
    except Exception:  # noqa: BLE001 - no kubeconfig, or an unreadable one: nothing to go by
        return None
    return ((active or {}).get("context") or {}).get("namespace") or None


def resolve_namespace(configured: str | None) -> str:
    """``kubernetes.namespace`` checked against the pod's own namespace; unset means the pod's own."""
    own = pod_namespace()
    if own is not None:
        if configured and configured != own:
            raise ConfigError(
                f"invalid config value for 'kubernetes.namespace': {configured!r}, but the train step runs in "
                f"namespace {own!r}. Its service account may create jobs only in its own namespace, and the "
                f"shared volume it stages the data on is the one in {own!r}, which pods in {configured!r} do not "
                f"mount. Leave kubernetes.namespace unset (the step's own namespace is used), or run the "
                f"pipeline in {configured!r} (KFP: that profile's namespace)."
            )
        return own
    if configured:
        return configured
    from_context = kubeconfig_namespace()
    if from_context:
        return from_context
    raise ConfigError(
        "kubernetes.namespace is unset and this process is not in a Kubernetes pod (no service-account "
        f"namespace at {SERVICE_ACCOUNT_NAMESPACE}) nor has a kubeconfig context with a namespace. Set "
        "kubernetes.namespace to the namespace the job should run in, e.g. --set kubernetes.namespace=ctpipe."
    )
