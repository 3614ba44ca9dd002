"""MLflow access shared by the steps: the tracking URI, experiments, and the champion's files.

Locally the tracking store is SQLite in the ctpipe home; on a cluster it is the MLflow server from
``manifests/``. Experiments are always created with an explicit artifact location (MLflow 3 would
otherwise pick one relative to the current directory).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlparse

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def local_tracking_uri(home: str | Path) -> str:
    """The SQLite tracking URI of a ctpipe home."""
    return f"sqlite:///{Path(home).resolve() / 'mlflow.db'}"


def artifact_location(tracking_uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps artifacts: beside the SQLite file locally, the server's default remotely."""
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "sqlite":
        db_path = Path(tracking_uri[len("sqlite:///") :])
        return (db_path.parent / "mlartifacts" / experiment).as_uri()
    if parsed.scheme in ("", "file"):
        return None
    return None  # an HTTP server proxies artifacts (mlflow-artifacts:/)


def use_tracking(tracking_uri: str) -> None:
    """Point the mlflow client at ``tracking_uri`` (also the registry)."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_registry_uri(tracking_uri)


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """Get or create the experiment ``name`` with an explicit artifact location; return its id."""
    import mlflow
    from mlflow.exceptions import MlflowException

    use_tracking(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(tracking_uri, name))
    except MlflowException:
        # Another process created it between our lookup and create.
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


def get_alias_version(tracking_uri: str, model_name: str, alias: str):
    """The model version behind ``alias``, or None when the model or alias does not exist yet."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        return client.get_model_version_by_alias(model_name, alias)
    except MlflowException as err:
        if "RESOURCE_DOES_NOT_EXIST" in str(err.error_code) or "not found" in str(err).lower():
            return None
        raise


def download_version_file(tracking_uri: str, version, relative_path: str, dst_dir: str | Path) -> Path | None:
    """Download one file logged on a model version's source run; None when it was not logged."""
    import mlflow
    from mlflow.exceptions import MlflowException

    use_tracking(tracking_uri)
    try:
        local = mlflow.artifacts.download_artifacts(
            run_id=version.run_id, artifact_path=relative_path, dst_path=str(dst_dir), tracking_uri=tracking_uri
        )
    except (MlflowException, OSError):
        return None
    path = Path(local)
    return path if path.exists() else None
