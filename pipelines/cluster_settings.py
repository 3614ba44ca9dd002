"""kfp-kubernetes settings that a compiled pipeline's tasks carry on a cluster.

Everything comes from ``config.kubernetes``; the compiled spec holds secret *names* and keys, never
values. The run's service account is not a per-task setting in KFP: ``ctpipe deploy``/``submit`` pass
``kubernetes.service_account`` when they create runs, and the launcher (train step) then talks to the
API server with that account's namespace-scoped RBAC from ``manifests/``.
"""

from __future__ import annotations

from kfp import kubernetes

from ctpipe.components.lib.config import KubernetesConfig
from ctpipe.components.lib.kube.images import pull_policy

# Steps that read or write the shared volume: the data root lives there by default
# (/mnt/ctpipe/data), and the train step stages snapshots and checkpoints there for the worker pods.
STEPS_ON_SHARED_VOLUME = {"prepare_run", "validate_data", "sanity_checks", "tune", "train", "select_checkpoint", "evaluate",
                          "register"}
# The train step only launches and follows the PyTorchJob: the work happens in the worker pods. (The tune step
# launches jobs too, but one launcher process per parallel trial: it keeps the step limits.)
LAUNCHER_LIMITS = {"cpu": "1", "memory": "2Gi"}
# No per-task securityContext: the component image already runs as USER 10001:10001, and
# kfp-kubernetes' set_security_context (2026) needs a KFP backend new enough to know the field.


def apply_cluster_settings(task, step: str, kube: KubernetesConfig) -> None:
    """Secrets as env, image pull secrets and policy, placement, limits and the shared volume for one task."""
    for secret, keys in sorted(kube.env_from_secrets.items()):
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env={k: k for k in keys})
    for key, value in sorted(kube.step_node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in kube.step_tolerations:
        kubernetes.add_toleration(
            task,
            key=tol.get("key"),
            operator=tol.get("operator", "Equal"),
            value=tol.get("value"),
            effect=tol.get("effect") or None,
            toleration_seconds=tol.get("tolerationSeconds"),
        )
    if kube.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, list(kube.image_pull_secrets))
    kubernetes.set_image_pull_policy(task, pull_policy(kube.image))
    if kube.shared_pvc and step in STEPS_ON_SHARED_VOLUME:
        kubernetes.mount_pvc(task, pvc_name=kube.shared_pvc, mount_path=kube.shared_mount_path)
    kubernetes.add_pod_label(task, label_key="app.kubernetes.io/part-of", label_value="ctpipe")
    cpu = LAUNCHER_LIMITS["cpu"] if step == "train" else kube.step_cpu_limit
    memory = LAUNCHER_LIMITS["memory"] if step == "train" else kube.step_memory_limit
    task.set_cpu_request(cpu).set_cpu_limit(cpu)
    task.set_memory_request(memory).set_memory_limit(memory)
