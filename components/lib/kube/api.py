"""A Kubernetes API client with the credentials at hand: the pod's service account, else the local kubeconfig."""

from __future__ import annotations

from kubernetes import client


def default_api_client() -> client.ApiClient:
    """In-cluster credentials (the step's service account), else the local kubeconfig."""
    from kubernetes import config as kube_config

    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config()
    return client.ApiClient()
