"""A run's configuration, resolved in one place from every layer, and the run form declared once.

    from ctpipe.components.run_config import resolve_config
    config = resolve_config(file="my.yaml", settings=["train.max_steps=200"])

``resolve.py`` applies the layers (defaults, the task's, the cluster's, the task key, the demo's, the
file, ``--set``; at run time the compiled config, the run form and the run's overrides) in one documented
order; ``run_form.py`` is the table of the run form's knobs that the pipeline, prepare_run and the docs
derive from.
"""

from ctpipe.components.run_config.resolve import (
    CLUSTER_BACKENDS,
    CLUSTER_DEFAULTS,
    DEMO_KEY_COLUMN,
    MLFLOW_BASIC_AUTH,
    MLFLOW_CLIENT_SECRET,
    MLFLOW_TOKEN,
    ResolvedConfig,
    check_cluster_config,
    demo_settings,
    load_config,
    resolve_config,
    resolve_layers,
    split_overrides,
)

__all__ = [
    "CLUSTER_BACKENDS",
    "CLUSTER_DEFAULTS",
    "DEMO_KEY_COLUMN",
    "MLFLOW_BASIC_AUTH",
    "MLFLOW_CLIENT_SECRET",
    "MLFLOW_TOKEN",
    "ResolvedConfig",
    "check_cluster_config",
    "demo_settings",
    "load_config",
    "resolve_config",
    "resolve_layers",
    "split_overrides",
]
