"""kfp-kubernetes settings that a compiled pipeline's tasks carry on a cluster."""

from __future__ import annotations

from kfp import kubernetes

from components.config import KubernetesConfig

# Steps that read or write the shared volume (snapshots, checkpoints) on a cluster.
STEPS_ON_SHARED_VOLUME = {"validate_data", "sanity_checks", "train", "select_checkpoint", "evaluate", "register"}


def apply_cluster_settings(task, step: str, kube: KubernetesConfig) -> None:
    """Secrets as env, placement and limits; credentials never appear in the spec, only secret names."""
    for secret, keys in sorted(kube.env_from_secrets.items()):
        kubernetes.use_secret_as_env(task, secret_name=secret, secret_key_to_env={k: k for k in keys})
    for key, value in sorted(kube.node_selector.items()):
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in kube.tolerations:
        kubernetes.add_toleration(
            task,
            key=tol.get("key"),
            operator=tol.get("operator", "Equal"),
            value=tol.get("value"),
            effect=tol.get("effect"),
        )
    if kube.shared_pvc and step in STEPS_ON_SHARED_VOLUME:
        kubernetes.mount_pvc(task, pvc_name=kube.shared_pvc, mount_path=kube.shared_mount_path)
    task.set_cpu_limit("2" if step != "train" else "1")
    task.set_memory_limit("8G" if step in ("validate_data", "evaluate") else "4G")
