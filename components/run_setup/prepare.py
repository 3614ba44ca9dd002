"""The first step: resolve and validate the config, and open the pipeline run's MLflow run."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from components.config import TRIGGERS, Config, apply_override, merge_values
from components.errors import ConfigError


@dataclass
class PreparedRun:
    config_json: str
    mlflow_run_id: str


def resolve_config(config_json: str, overrides: str) -> Config:
    """The config from JSON (empty: defaults) with newline- or ';'-separated KEY=VALUE overrides applied."""
    base = Config.from_json(config_json).to_dict() if config_json.strip() else Config().to_dict()
    update: dict = {}
    for item in [s.strip() for s in overrides.replace(";", "\n").splitlines()]:
        if item:
            apply_override(update, item)
    return Config.from_dict(merge_values(base, update))


def git_commit() -> str:
    """The commit of the code being run: the CTPIPE_GIT_COMMIT baked into the image, else git, else ''."""
    import os

    baked = os.environ.get("CTPIPE_GIT_COMMIT", "")
    if baked:
        return baked
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except OSError:
        return ""


def prepare_run(
    config_json: str, overrides: str, *, tracking_uri: str, pipeline_run_id: str, trigger: str, data_uri: str
) -> PreparedRun:
    """Validate everything a run is configured with, then get-or-create its MLflow run (idempotent on retry)."""
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    config = resolve_config(config_json, overrides)
    import mlflow

    from components.tracking import ensure_experiment, use_tracking

    experiment_id = ensure_experiment(tracking_uri, config.registry.experiment)
    use_tracking(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    existing = client.search_runs(
        [experiment_id], filter_string=f"tags.`ctpipe.pipeline_run_id` = '{pipeline_run_id}'", max_results=1
    )
    if existing:
        run_id = existing[0].info.run_id
    else:
        run = client.create_run(
            experiment_id,
            run_name=f"ctpipe-{pipeline_run_id}",
            tags={
                "ctpipe.pipeline_run_id": pipeline_run_id,
                "ctpipe.trigger": trigger,
                "ctpipe.data_uri": data_uri,
                "ctpipe.git_commit": git_commit(),
            },
        )
        run_id = run.info.run_id
        client.log_text(run_id, config.to_json(), "config/config.json")
    return PreparedRun(config_json=config.to_json(), mlflow_run_id=run_id)
