"""Apply the retention policy (``retention.*``) to a ctpipe home and its MLflow runs: ``ctpipe gc``.

A home holds ``runs/<stamp>-<pid>/`` (steps' records, ``summary.json``), ``pipeline_root/<KFP job name>/``
(every step's outputs, checkpoints under ``train/checkpoints``; the steps' records name it) and, locally, ``mlflow.db`` with ``mlartifacts/``.
What is kept, in order of precedence:

1. runs still going (their process alive), whatever their age;
2. the MLflow runs of every registered model version, with their artifacts (what serving, ``models show`` and
   a promotion read; ``versions.py`` bounds which versions stay registered), and every run such a version links
   (the content run of its pipeline run: Data Docs, sanity report, training curves; its card's and reasons'
   runs: ``versions.linked_runs``); of the champion's lineage (the versions an alias points at, and the previous champion,
   which a rollback restores) the local folders too: only their checkpoints go;
3. the newest ``keep_last_runs`` runs: their checkpoints go once they finished (but the newest succeeded
   run's, which its cached train step names: a rerun on unchanged data reuses it);
4. failed or killed runs younger than ``keep_failed_days``: kept whole (a retry resumes from them).

Everything else is deleted: the run folder, the pipeline-root folder, and the MLflow run with its artifacts.
A run whose process is gone without a summary was killed: its MLflow run, if still RUNNING, is marked
KILLED (as is any MLflow run RUNNING for ``killed_after_hours``); a failed run's MLflow run still RUNNING (its
step could not end it: MLflow's store on the same full disk) is ended FAILED. With ``dry_run`` nothing is changed and the
plan is returned.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import read_json_object
from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.processes import pid_alive
from ctpipe.components.lib.registry.lock import RegistryBusyError
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.pipelines.retention.purge import (
    CACHE_DIR,
    prune_kfp_cache,
    purge_deleted_runs,
    purge_deleted_version_tags,
)
from ctpipe.pipelines.retention.versions import (
    history_page_runs,
    linked_runs,
    retire_versions,
    strip_to_history_pages,
)

CHECKPOINTS = Path("train") / "checkpoints"
# Local folders kept for the champion's lineage: the champion and the champion a rollback restores (every
# older one keeps its MLflow run and artifacts, all that a rollback to it needs).
LINEAGE_DEPTH = 2
ROOT_PATH = re.compile(r"pipeline_root/([A-Za-z0-9._-]+)/")


@dataclass
class RunFolder:
    """One local run as its folder shows it."""

    path: Path
    root_name: str | None  # its folder under pipeline_root (KFP's job name, not the pipeline run id)
    mlflow_run_id: str | None
    status: str  # "succeeded", "failed", "running" or "killed"
    ended_at: float

    @property
    def root_dir(self) -> Path | None:
        return self.path.parent.parent / "pipeline_root" / self.root_name if self.root_name else None


@dataclass
class GcReport:
    """What a collection did (or, dry, would do)."""

    dry_run: bool
    runs_seen: int = 0
    runs_kept: list[str] = field(default_factory=list)
    runs_deleted: list[str] = field(default_factory=list)
    checkpoints_deleted: list[str] = field(default_factory=list)
    mlflow_runs_deleted: list[str] = field(default_factory=list)
    mlflow_runs_killed: list[str] = field(default_factory=list)
    mlflow_runs_failed: list[str] = field(default_factory=list)  # a failed run's MLflow run left RUNNING
    model_versions_deleted: list[str] = field(default_factory=list)
    mlflow_runs_purged: list[str] = field(default_factory=list)  # deleted runs' rows removed for good
    version_tags_purged: int = 0
    cache_entries_deleted: list[str] = field(default_factory=list)
    history_runs_stripped: list[str] = field(default_factory=list)  # kept for their history pages alone
    skipped: list[str] = field(default_factory=list)  # what waits for the next gc, and why
    bytes_freed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_run_folder(path: Path) -> RunFolder:
    """The run's ids and status from its summary, else from its first step's record and its process."""
    summary = read_json_object(path / "summary.json")
    prepared = read_json_object(path / "steps" / "prepare_run.json").get("result") or {}
    mlflow_run_id = summary.get("mlflow_run_id") or prepared.get("mlflow_run_id")
    last_write = max((p.stat().st_mtime for p in path.rglob("*") if p.is_file()), default=path.stat().st_mtime)
    if summary.get("status") in ("succeeded", "failed"):
        status = summary["status"]
    else:
        pid = path.name.rsplit("-", 1)[-1]
        status = "running" if pid.isdigit() and pid_alive(int(pid)) else "killed"
    return RunFolder(path, _pipeline_root_name(path), mlflow_run_id, status, last_write)


def _pipeline_root_name(path: Path) -> str | None:
    """The run's folder under pipeline_root, as its steps' records name their outputs there."""
    for record in sorted((path / "steps").glob("*.json")):
        try:
            found = ROOT_PATH.search(record.read_text())
        except OSError:
            continue
        if found:
            return found.group(1)
    return None


def _bytes_under(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _registered_runs(client, registry_config: RegistryConfig) -> tuple[set[str], set[str]]:
    """The MLflow runs of every registered version (of any model: their artifacts stay) with the runs each one
    links (``linked_runs``), and of the champion's lineage (the versions an alias points at and the previous
    champion: their local folders stay)."""
    from mlflow.exceptions import MlflowException

    from ctpipe.components.lib.registry.tags import STACK_TAG

    versions = client.search_model_versions(max_results=100_000)
    # Each version's own run and every run it links (its content run, its card's and reasons' runs).
    registered = {str(v.run_id) for v in versions if v.run_id} | linked_runs(client, versions)
    try:
        model = client.get_registered_model(registry_config.model_name)
    except MlflowException:
        return registered, set()
    # The rollback stack holds up to keep_champions versions: their MLflow runs stay, their folders need not.
    stack = [str(v) for v in json.loads((model.tags or {}).get(STACK_TAG, "[]"))]
    lineage = {str(v) for v in (model.aliases or {}).values()} | set(stack[-LINEAGE_DEPTH:])
    mine = {str(v.version): str(v.run_id) for v in versions if v.name == registry_config.model_name and v.run_id}
    return registered, {mine[v] for v in map(str, lineage) if v in mine}


def collect_garbage(
    home: str | Path,
    retention: RetentionConfig,
    registry_config: RegistryConfig,
    tracking_uri: str,
    *,
    dry_run: bool = False,
    now: float | None = None,
) -> GcReport:
    """Apply ``retention`` to ``home`` and the MLflow runs at ``tracking_uri``; see the module docstring."""
    import mlflow

    now = time.time() if now is None else now
    home = Path(home)
    report = GcReport(dry_run=dry_run)
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    folders = sorted((p for p in (home / "runs").glob("*-*") if p.is_dir()), key=lambda p: p.name)
    runs = [read_run_folder(p) for p in folders]
    report.runs_seen = len(runs)
    newest = {r.path for r in runs[-retention.keep_last_runs :]}
    # The newest succeeded run keeps its checkpoints: kfp.local's cache entry of its train step names them, and
    # a rerun on unchanged data reuses train (and select) only while they exist.
    cache_run = next((r.path for r in reversed(runs) if r.status == "succeeded"), None)
    failed_horizon = now - retention.keep_failed_days * 86_400
    running = {r.mlflow_run_id for r in runs if r.status == "running"}
    # Versions first: a version deleted here leaves an unregistered run, which the rules below delete.
    try:
        report.model_versions_deleted = retire_versions(
            tracking_uri, registry_config, retention, {r for r in running if r}, dry_run=dry_run
        )
    except RegistryBusyError as err:  # a promotion is under way: the versions wait for the next gc
        report.skipped.append(f"model versions: {err}")
    protected, lineage = _registered_runs(client, registry_config)
    # The runs holding the champion history's pages stay; once unregistered, with those pages alone.
    for run_id in sorted(history_page_runs(Registry(tracking_uri, registry_config)) - protected):
        if strip_to_history_pages(client, run_id, dry_run=dry_run):
            report.history_runs_stripped.append(run_id)
        protected.add(run_id)
    known_roots = {r.root_name for r in runs if r.root_name}
    kept_mlflow: set[str | None] = set()
    for run in runs:
        if run.status == "killed" and run.mlflow_run_id:
            _mark_killed(client, run.mlflow_run_id, report, dry_run)
        elif run.status == "failed" and run.mlflow_run_id:
            # Its step could not end it (the MLflow store on the same full disk, or down at that moment).
            _mark_killed(client, run.mlflow_run_id, report, dry_run, status="FAILED")
        young_failure = run.status in ("failed", "killed") and run.ended_at >= failed_horizon
        if run.status == "running" or run.mlflow_run_id in lineage or run.path in newest or young_failure:
            report.runs_kept.append(run.path.name)
            kept_mlflow.add(run.mlflow_run_id)
            finished = run.status != "running" and not young_failure and run.path != cache_run
            if retention.delete_checkpoints and finished:
                _delete_checkpoints(run, report, dry_run)
            continue
        report.runs_deleted.append(run.path.name)
        for path in (run.path, run.root_dir):
            if path is not None and path.exists():
                report.bytes_freed += _bytes_under(path)
                if not dry_run:
                    shutil.rmtree(path)
        if run.mlflow_run_id and run.mlflow_run_id not in protected:
            _delete_mlflow_run(client, run.mlflow_run_id, report, dry_run)
    _delete_orphan_roots(home / "pipeline_root", known_roots, failed_horizon, report, dry_run)
    report.cache_entries_deleted = prune_kfp_cache(home / "pipeline_root", failed_horizon, dry_run=dry_run)
    _prune_mlflow_runs(client, registry_config, retention, protected | kept_mlflow, failed_horizon, report, dry_run)
    _kill_stale_mlflow_runs(client, registry_config, retention, now, running, report, dry_run)
    experiment = client.get_experiment_by_name(registry_config.experiment)
    if experiment is not None:
        report.mlflow_runs_purged = purge_deleted_runs(client, tracking_uri, experiment.experiment_id, dry_run=dry_run)
    report.version_tags_purged = purge_deleted_version_tags(
        client, tracking_uri, registry_config.model_name, dry_run=dry_run
    )
    return report


def _delete_orphan_roots(root: Path, known: set[str], horizon: float, report: GcReport, dry_run: bool) -> None:
    """Pipeline-root folders of no run folder (their run was deleted, or never wrote one), untouched since
    ``horizon``: nothing refers to them."""
    for path in sorted(root.glob("*")) if root.is_dir() else []:
        if path.name == CACHE_DIR:
            continue  # kfp.local's cache: pruned entry by entry (prune_kfp_cache)
        if path.is_dir() and path.name not in known and path.stat().st_mtime < horizon:
            report.runs_deleted.append(f"pipeline_root/{path.name}")
            report.bytes_freed += _bytes_under(path)
            if not dry_run:
                shutil.rmtree(path)


def _delete_checkpoints(run: RunFolder, report: GcReport, dry_run: bool) -> None:
    """The run's checkpoints (the export selection wrote from them lives in its own output folder)."""
    checkpoints = run.root_dir / CHECKPOINTS if run.root_dir else None
    if checkpoints is None or not checkpoints.exists():
        return
    report.checkpoints_deleted.append(run.path.name)
    report.bytes_freed += _bytes_under(checkpoints)
    if not dry_run:
        shutil.rmtree(checkpoints)


def _mark_killed(client, run_id: str, report: GcReport, dry_run: bool, status: str = "KILLED") -> None:
    """End the MLflow run of a run that is over (killed, or failed) as ``status`` if it still says RUNNING."""
    from mlflow.exceptions import MlflowException

    try:
        info = client.get_run(run_id).info
    except MlflowException:
        return  # already gone
    if info.status == "RUNNING":
        (report.mlflow_runs_killed if status == "KILLED" else report.mlflow_runs_failed).append(run_id)
        if not dry_run:
            client.set_terminated(run_id, status=status)


def _delete_mlflow_run(client, run_id: str, report: GcReport, dry_run: bool) -> None:
    """Delete the MLflow run and its artifacts (the run's row stays, marked deleted, as MLflow keeps them)."""
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    try:
        run = client.get_run(run_id)
    except MlflowException:
        return
    report.mlflow_runs_deleted.append(run_id)
    artifact_uri = run.info.artifact_uri
    if artifact_uri.startswith("file://"):
        report.bytes_freed += _bytes_under(Path(artifact_uri.removeprefix("file://")))
    if dry_run:
        return
    if run.info.status == "RUNNING":
        client.set_terminated(run_id, status="KILLED")
    get_artifact_repository(artifact_uri).delete_artifacts()
    if run.info.lifecycle_stage != "deleted":
        client.delete_run(run_id)


def _kill_stale_mlflow_runs(
    client, registry_config: RegistryConfig, retention: RetentionConfig, now: float, running: set[str | None],
    report: GcReport, dry_run: bool,
) -> None:
    """MLflow runs RUNNING past ``killed_after_hours`` in the pipeline's experiment: their process is gone."""
    experiment = client.get_experiment_by_name(registry_config.experiment)
    if experiment is None:
        return
    horizon_ms = (now - retention.killed_after_hours * 3600) * 1000
    for run in client.search_runs([experiment.experiment_id], "attributes.status = 'RUNNING'", max_results=10_000):
        stale = run.info.start_time < horizon_ms and run.info.run_id not in running
        if stale and run.info.run_id not in report.mlflow_runs_killed:
            report.mlflow_runs_killed.append(run.info.run_id)
            if not dry_run:
                client.set_terminated(run.info.run_id, status="KILLED")


def _prune_mlflow_runs(
    client, registry_config: RegistryConfig, retention: RetentionConfig, keep: set, failed_horizon: float,
    report: GcReport, dry_run: bool,
) -> None:
    """The same policy on the pipeline's MLflow runs that have no local folder (runs on a cluster): keep the
    newest ``keep_last_runs``, those in ``keep`` (registered, or a kept local run's), running ones and recent
    failures; delete the rest with their artifacts."""
    experiment = client.get_experiment_by_name(registry_config.experiment)
    if experiment is None:
        return
    from ctpipe.components.lib.tracking import TRAINING_RUN_TAG

    found = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=10_000)
    # A child run (a tune step's trial, the content run of the pipeline run that first trained it:
    # mlflow.parentRunId) is its parent's: kept and deleted with it, unless kept itself (a registered version
    # links it) or named by a run that stays (a later pipeline run that reused it from the cache).
    children: dict[str, list[str]] = {}
    for run in found:
        if parent := run.data.tags.get("mlflow.parentRunId"):
            children.setdefault(parent, []).append(run.info.run_id)
    top = [run for run in found if "mlflow.parentRunId" not in run.data.tags]
    gone_parents = set(children) - {run.info.run_id for run in found}  # their parent was deleted earlier
    for run in top[retention.keep_last_runs :]:
        info = run.info
        recent_failure = info.status in ("FAILED", "KILLED") and (info.end_time or 0) >= failed_horizon * 1000
        if info.run_id in keep or info.status in ("RUNNING", "SCHEDULED") or recent_failure:
            continue
        gone_parents.add(info.run_id)
        if info.run_id not in report.mlflow_runs_deleted:
            _delete_mlflow_run(client, info.run_id, report, dry_run)
    named = {run.data.tags.get(TRAINING_RUN_TAG) for run in found if run.info.run_id not in report.mlflow_runs_deleted}
    for child in [c for parent in sorted(gone_parents) for c in children.get(parent, [])]:
        if child not in report.mlflow_runs_deleted and child not in keep and child not in named:
            _delete_mlflow_run(client, child, report, dry_run)
