"""The config a pipeline is compiled (or submitted) with for a Kubeflow cluster.

``ctpipe run`` defaults suit a laptop (``train.backend: local``, no secrets). A cluster pipeline built from
those would train inside its 1-CPU step pod and meet MLflow's basic auth without credentials (401). So
``ctpipe compile``/``deploy``/``submit --host`` start from cluster defaults instead — ``train.backend: auto``
(a TrainJob where Trainer v2 is installed, else a PyTorchJob, found when the train step runs), and the
MLflow client credentials from the ``ctpipe-mlflow-client`` secret that ``manifests/secrets`` creates —
under the user's file and ``--set`` values, and refuse a config that would still train locally or carry no
MLflow credentials.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.tasks.run_config import load_run_config

CLUSTER_BACKENDS = ("auto", "trainjob", "pytorchjob")
MLFLOW_CLIENT_SECRET = "ctpipe-mlflow-client"
MLFLOW_BASIC_AUTH = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
MLFLOW_TOKEN = "MLFLOW_TRACKING_TOKEN"
CLUSTER_DEFAULTS: dict[str, Any] = {
    "train": {"backend": "auto"},
    "kubernetes": {"env_from_secrets": {MLFLOW_CLIENT_SECRET: list(MLFLOW_BASIC_AUTH)}},
}


def load_cluster_config(path: str | Path | None, overrides: list[str]) -> Config:
    """Cluster defaults, then the file at ``path``, then ``--set`` overrides; refused if unfit for a cluster."""
    config = load_run_config(path, overrides, defaults=copy.deepcopy(CLUSTER_DEFAULTS))
    check_cluster_config(config)
    return config


def check_cluster_config(config: Config) -> None:
    """Raise a ConfigError naming the field when ``config`` cannot run as a cluster pipeline."""
    backend = config.train.backend
    if backend not in CLUSTER_BACKENDS:
        raise ConfigError(
            f"invalid config value for 'train.backend' in a cluster pipeline: {backend!r}. The train step would "
            "train inside its own step pod (1 CPU, 2Gi: it only launches and follows jobs). Use 'auto' (the default "
            "when compiling: TrainJob where Kubeflow Trainer v2 is installed, else PyTorchJob), 'trainjob' or "
            "'pytorchjob', or leave train.backend unset; 'local' is for `ctpipe run`."
        )
    exposed = {key for keys in config.kubernetes.env_from_secrets.values() for key in keys}
    if not (set(MLFLOW_BASIC_AUTH) <= exposed or MLFLOW_TOKEN in exposed):
        given = dict(config.kubernetes.env_from_secrets) or "{}"
        raise ConfigError(
            f"invalid config value for 'kubernetes.env_from_secrets' in a cluster pipeline: {given} gives the steps "
            f"and the training pods no MLflow credentials (needs {' and '.join(MLFLOW_BASIC_AUTH)}, or "
            f"{MLFLOW_TOKEN}), so the MLflow server of manifests/ would answer 401. Use the secret "
            f"manifests/secrets creates: {{{MLFLOW_CLIENT_SECRET}: [{', '.join(MLFLOW_BASIC_AUTH)}]}} (the default "
            "when unset), or name your own secret with those keys."
        )
