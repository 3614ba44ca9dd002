"""The MLflow store: its URI, experiments, the pipeline run's MLflow run, aliases and version files.

Locally the tracking store is SQLite in the ctpipe home; on a cluster it is the MLflow server from
``manifests/``. Experiments are always created with an explicit artifact location (MLflow 3 would
otherwise pick one relative to the current directory).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from ctpipe.components.lib.tracking.retry import RetryPolicy, bounded_mlflow_http, error_code
from ctpipe.components.lib.tracking.sqlite_store import open_sqlite_store

if TYPE_CHECKING:
    from ctpipe.components.lib.config import RegistryConfig


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
    # Under the store directory's lock; a new local store is built whole (sqlite_store.py).
    open_sqlite_store(tracking_uri)


# MLflow 3's experiment type: a model-training experiment, not a GenAI one (whose page opens on traces).
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


def ensure_experiment(tracking_uri: str, name: str) -> str:
    """Get or create the experiment ``name`` with an explicit artifact location, typed as model training."""
    import mlflow
    from mlflow.exceptions import MlflowException

    use_tracking(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    found = client.get_experiment_by_name(name)
    if found is not None:
        if found.tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:  # a home made before the type was set
            client.set_experiment_tag(found.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        return found.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location(tracking_uri, name),
                                        tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND})
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
    """Download one file logged on a model version's source run; None when it was not logged.

    Only "does not exist" means not logged: any other failure (MLflow unreachable, a reset connection) is
    raised, for the caller's retries, instead of passing for a version without that file."""
    import mlflow
    from mlflow.exceptions import MlflowException

    use_tracking(tracking_uri)
    try:
        local = mlflow.artifacts.download_artifacts(
            run_id=version.run_id, artifact_path=relative_path, dst_path=str(dst_dir), tracking_uri=tracking_uri
        )
    except FileNotFoundError:
        return None
    except MlflowException as err:
        if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise
    path = Path(local)
    return path if path.exists() else None


def find_or_create_run(
    tracking_uri: str, experiment_id: str, *, key_tag: str, key: str, run_name: str, tags: dict[str, str]
) -> tuple[str, bool]:
    """The run of ``experiment_id`` tagged ``key_tag=key``, else a new one with ``tags``; (run id, created)."""
    import mlflow

    use_tracking(tracking_uri)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    existing = client.search_runs([experiment_id], filter_string=f"tags.`{key_tag}` = '{key}'", max_results=1)
    if existing:
        return existing[0].info.run_id, False
    run = client.create_run(experiment_id, run_name=run_name, tags={**tags, key_tag: key})
    return run.info.run_id, True


def create_run(tracking_uri: str, experiment_id: str, *, run_name: str, tags: dict[str, str]) -> str:
    """A new run of ``experiment_id`` named ``run_name`` with ``tags``; its id (not retried: a create whose
    response was lost may have succeeded, see ``find_or_create_run``)."""
    import mlflow

    return mlflow.MlflowClient(tracking_uri).create_run(experiment_id, run_name=run_name, tags=tags).info.run_id


def tags_of_runs_tagged(
    tracking_uri: str, experiment: str, tag: str, value: str, *, max_results: int = 10, retry: RetryPolicy | None = None
) -> list[dict[str, str]]:
    """The tags of each run of experiment ``experiment`` tagged ``tag=value`` (none without the experiment), retried."""
    import mlflow

    def search() -> list[dict[str, str]]:
        client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            return []
        runs = client.search_runs([found.experiment_id], filter_string=f"tags.`{tag}` = '{value}'", max_results=max_results)
        return [dict(run.data.tags) for run in runs]

    with bounded_mlflow_http():
        return (retry or RetryPolicy()).call(search, f"find the runs of experiment '{experiment}' tagged {tag}={value}")


def end_run(tracking_uri: str, run_id: str, status: str = "FINISHED") -> None:
    """Mark run ``run_id`` as ended with ``status`` (a run logged to by hand, not by ``mlflow.start_run``)."""
    import mlflow

    mlflow.MlflowClient(tracking_uri=tracking_uri).set_terminated(run_id, status)


def end_pipeline_run(tracking_uri: str, run_id: str, status: str, *, retry: RetryPolicy | None = None) -> bool:
    """End the pipeline run's MLflow run (opened by the first step, logged to by every step) with ``status``:
    FINISHED by the last step, FAILED or KILLED by a step that fails. Without it MLflow shows every pipeline
    run as RUNNING forever, finished or dead alike. Best effort: False when there is no run or MLflow stays
    unavailable (a failing step's own error is what matters then)."""
    if not tracking_uri or not run_id:
        return False
    try:
        with bounded_mlflow_http():
            (retry or RetryPolicy()).call(lambda: end_run(tracking_uri, run_id, status),
                                          f"mark MLflow run {run_id} {status}")
    except Exception:  # noqa: BLE001 - never replaces the step's outcome
        return False
    return True


def run_tags(tracking_uri: str, run_id: str) -> dict[str, str]:
    """The tags of run ``run_id``."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    return dict(client.get_run(run_id).data.tags)


@dataclass
class VersionFiles:
    """A model version's number and files of its run, downloaded; a file not logged maps to None."""

    version: str
    files: dict[str, Path | None]
    tags: dict[str, str] = field(default_factory=dict)  # the version's tags (its lineage)


def fetch_champion_files(
    tracking_uri: str, registry: RegistryConfig, relative_paths: list[str], dst_dir: str | Path
) -> VersionFiles | None:
    """The champion (``registry.champion_alias``) and the given files of its run, retried; None without one."""
    policy = RetryPolicy.of(registry)
    alias, model = registry.champion_alias, registry.model_name
    with bounded_mlflow_http():
        version = policy.call(lambda: get_alias_version(tracking_uri, model, alias),
                              f"look up the '{alias}' alias of '{model}'")
        if version is None:
            return None
        number = str(version.version)
        files = {
            path: policy.call(lambda path=path: download_version_file(tracking_uri, version, path, dst_dir),
                              f"download '{path}' of the {alias} (version {number})")
            for path in relative_paths
        }
    return VersionFiles(number, files, dict(version.tags or {}))
