"""What ``ctpipe gc`` removes for good after the policy: deleted MLflow runs' rows, deleted versions' tags, and
kfp.local cache entries nobody can reuse.

MLflow's delete is soft: a deleted run keeps its rows (metrics, params, tags) in the database, and a deleted
model version keeps its tags. ``mlflow gc`` is MLflow's own way to remove deleted runs for good; on the
embedded SQLite store (a local home) ``ctpipe gc`` does what it does, through the same store methods
(``_hard_delete_run``), for the pipeline's experiment. Against a tracking server run ``mlflow gc
--backend-store-uri <the server's database>`` beside it (docs/retention.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

CACHE_DIR = ".kfp_cache"
_ARTIFACT_MARKER = "__kfp_artifact__"
_ARTIFACT_LIST_MARKER = "__kfp_artifact_list__"
# A kfp.local cache write in progress is a temp file renamed into place; one this old was left by a killed run.
STALE_TEMP_SECONDS = 3600


def purge_deleted_runs(client: Any, tracking_uri: str, experiment_id: str, *, dry_run: bool) -> list[str]:
    """Hard-delete the experiment's deleted runs on a SQLite store (their artifacts first): the ids."""
    from mlflow.entities import ViewType
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    store = client._tracking_client.store
    if not tracking_uri.startswith("sqlite:") or not hasattr(store, "_hard_delete_run"):
        return []  # a server: `mlflow gc` on its backend store does this
    deleted = client.search_runs([experiment_id], run_view_type=ViewType.DELETED_ONLY, max_results=10_000)
    for run in deleted if not dry_run else []:
        # Artifacts first, as `mlflow gc` does: a gc killed in between leaves a deleted run the next one purges.
        get_artifact_repository(run.info.artifact_uri).delete_artifacts()
        store._hard_delete_run(run.info.run_id)
        _remove_empty_run_folder(run.info.artifact_uri)
    return [run.info.run_id for run in deleted]


def _remove_empty_run_folder(artifact_uri: str) -> None:
    """A local store leaves ``<experiment>/<run id>/`` (empty once its artifacts are gone): one folder a run."""
    from mlflow.utils.file_utils import local_file_uri_to_path

    if not artifact_uri.startswith("file:"):
        return
    artifacts = Path(local_file_uri_to_path(artifact_uri))
    for folder in (artifacts, artifacts.parent) if artifacts.name == "artifacts" else (artifacts,):
        with contextlib.suppress(OSError):  # not empty (not ours to judge) or already gone
            folder.rmdir()


def purge_deleted_version_tags(client: Any, tracking_uri: str, model_name: str, *, dry_run: bool) -> int:
    """Remove the tags MLflow keeps on deleted versions of ``model_name`` (SQLite store): the number removed."""
    from mlflow.entities.model_registry.model_version_stages import STAGE_DELETED_INTERNAL
    from mlflow.store.model_registry.dbmodels.models import SqlModelVersion, SqlModelVersionTag

    store = client._get_registry_client().store
    if not tracking_uri.startswith("sqlite:") or not hasattr(store, "ManagedSessionMaker"):
        return 0
    with store.ManagedSessionMaker(read_only=dry_run) as session:
        deleted = session.query(SqlModelVersion.version).filter(
            SqlModelVersion.name == model_name, SqlModelVersion.current_stage == STAGE_DELETED_INTERNAL
        )
        tags = session.query(SqlModelVersionTag).filter(
            SqlModelVersionTag.name == model_name, SqlModelVersionTag.version.in_(deleted.scalar_subquery())
        )
        return tags.count() if dry_run else tags.delete(synchronize_session=False)


def _artifact_uris(value: Any) -> list[str]:
    """The artifact URIs a kfp.local cache entry's outputs name (``kfp/local/cache.py``'s format)."""
    if isinstance(value, dict) and value.get(_ARTIFACT_MARKER):
        return [str(value.get("uri", ""))]
    if isinstance(value, dict) and value.get(_ARTIFACT_LIST_MARKER):
        return [str(a.get("uri", "")) for a in value.get("artifacts", []) if isinstance(a, dict)]
    return []


def prune_kfp_cache(pipeline_root: Path, horizon: float, *, dry_run: bool) -> list[str]:
    """Delete kfp.local cache entries that can never be a hit again; the names deleted.

    An entry names the outputs of one executed step. kfp.local treats an entry whose local output is gone as a
    miss, so an entry naming an output ``gc`` deleted (its run's pipeline-root folder) goes. An entry naming
    no local file (parameters only) cannot be judged by its run, so it goes once older than ``horizon``.
    Entries of kept runs (the newest ones included) stay: a rerun on unchanged data still reuses their steps.
    Each entry is one file, so a concurrent run reads it whole or not at all (a miss)."""
    cache = pipeline_root / CACHE_DIR
    deleted: list[str] = []
    for entry in sorted(cache.iterdir()) if cache.is_dir() else []:
        try:
            modified = entry.stat().st_mtime
            if entry.suffix == ".tmp":
                dead = modified < time.time() - STALE_TEMP_SECONDS
            else:
                uris = [u for v in json.loads(entry.read_text()).values() for u in _artifact_uris(v)]
                local = [u for u in uris if u.startswith("/")]
                dead = any(not os.path.exists(u) for u in local) if local else modified < horizon
        except (OSError, ValueError, AttributeError):
            dead = True  # unreadable: kfp.local reads it as a miss too
        if dead:
            deleted.append(entry.name)
            if not dry_run:
                entry.unlink(missing_ok=True)
    return deleted
