"""The bounded version policy of ``ctpipe gc``: old model versions nobody can serve or restore leave the registry.

Every daily candidate becomes a registered version, and a registered version's run keeps its artifacts
(``gc`` rule 2). Without a bound the registry, its database and its artifacts grow by one version a day for
ever. A version of the pipeline's model is kept while any of these holds:

- it is among the newest ``retention.keep_versions`` versions;
- an alias points at it, or it is in the rollback stack (which ``gc`` trims to ``retention.keep_champions``
  entries, so a rollback can go back that far and never to a deleted version);
- it is among the last ``retention.keep_champions`` champions of the champion history;
- its run is still running (a registration in progress).

Any other version is deleted with MLflow's model-version delete (it disappears from the registry; MLflow
keeps a redacted row so that its number is never reused). Its run is then an unregistered run, which the
rest of ``gc`` deletes with its artifacts. What the champion history says of it (version, previous, kind,
by, reason clipped to 500 characters, time) stays in the history tag and its pages. A run that holds a page
of the champion history (``ctpipe models history --pages`` follows them) is kept, but once its version is
deleted it keeps only those pages (``strip_to_history_pages``).

The whole decision and the deletions happen under the promotion lock, so no promotion, rollback or
registration can pick a version while it is being deleted. A killed ``gc`` leaves each version either
registered or deleted; the next one finishes the rest.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.registry.history import PAGE_DIR, HistoryTag
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import HISTORY_TAG, STACK_TAG

# A runs:/RUN_ID/... address in a version's description or promotion record (its card, a full reason).
_RUNS_URI = re.compile(r"runs:/([0-9a-f]{32})/")


def linked_runs(client: Any, versions: list[Any]) -> set[str]:
    """Every MLflow run the ``versions`` point to, besides their own: the content run their pipeline run names
    (``ctpipe.training_run_id``: validation's Data Docs, the sanity report, the training curves and index) and
    every ``runs:/`` address in their description and tags (the model card, a promotion's full reason). A kept
    version keeps them all, so none of its links dangles."""
    from mlflow.exceptions import MlflowException

    from ctpipe.components.lib.tracking import TRAINING_RUN_TAG

    linked: set[str] = set()
    for version in versions:
        texts = [version.description or "", *(version.tags or {}).values()]
        linked |= {run_id for text in texts for run_id in _RUNS_URI.findall(text)}
        if not version.run_id:
            continue
        try:
            training = client.get_run(version.run_id).data.tags.get(TRAINING_RUN_TAG)
        except MlflowException:
            continue  # its own run is gone (deleted outside ctpipe): nothing of it to follow
        if training:
            linked.add(training)
    return linked - {str(v.run_id) for v in versions}


def history_page_runs(registry: Registry) -> set[str]:
    """The runs holding a page of the champion history (the chain the history tag's ``older`` starts)."""
    runs: set[str] = set()
    older = HistoryTag.parse(registry.model_tags().get(HISTORY_TAG)).older
    while older and older.startswith("runs:/"):
        run_id = older.removeprefix("runs:/").split("/", 1)[0]
        if run_id in runs:
            break  # a cycle would be a bug elsewhere; never loop on it
        runs.add(run_id)
        older = json.loads(registry.read_record(older)).get("older")
    return runs


def last_champions(registry: Registry, count: int) -> list[str]:
    """The last ``count`` distinct versions the champion history moved to, newest first."""
    seen: list[str] = []
    for entry in reversed(registry.champion_history()):
        version = str(entry.get("version"))
        if version not in seen:
            seen.append(version)
        if len(seen) == count:
            break
    return seen


def versions_to_keep(
    versions: list[Any],
    aliases: dict[str, str],
    stack: list[str],
    champions: list[str],
    running_runs: set[str],
    keep_versions: int,
) -> set[str]:
    """The version numbers the policy keeps (see the module docstring)."""
    newest = sorted((str(v.version) for v in versions), key=int)[-keep_versions:]
    keep = set(newest) | {str(v) for v in aliases.values()} | set(stack) | set(champions)
    keep |= {str(v.version) for v in versions if v.run_id in running_runs}
    return keep


def strip_to_history_pages(client: Any, run_id: str, *, dry_run: bool) -> list[str]:
    """Delete every artifact of ``run_id`` but the champion history's records (``PAGE_DIR``): what was deleted."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    others = [a.path for a in client.list_artifacts(run_id) if a.path != PAGE_DIR]
    if others and not dry_run:
        repo = get_artifact_repository(client.get_run(run_id).info.artifact_uri)
        for path in others:
            repo.delete_artifacts(path)
    return others


def retire_versions(
    tracking_uri: str,
    registry_config: RegistryConfig,
    retention: RetentionConfig,
    running_runs: set[str],
    *,
    dry_run: bool,
    lock_wait_seconds: float = 60.0,
) -> list[str]:
    """Delete the pipeline's model versions outside the policy, under the promotion lock; the numbers deleted
    (or, dry, that would be). Trims the rollback stack to ``retention.keep_champions`` first.

    RegistryBusyError if a promotion holds the lock longer than ``lock_wait_seconds``: nothing was deleted."""
    registry = Registry(tracking_uri, registry_config)
    client = registry.client
    if not registry.call(
        lambda: client.search_registered_models(f"name = '{registry.name}'"), "find the model"
    ):
        return []
    with registry.locked(lock_wait_seconds):
        stack = registry.champion_stack()
        if len(stack) > retention.keep_champions and not dry_run:
            stack = stack[-retention.keep_champions :]
            value = json.dumps(stack)
            registry.lock.assert_held()
            registry.call(
                lambda: client.set_registered_model_tag(registry.name, STACK_TAG, value), "trim the stack"
            )
        stack = stack[-retention.keep_champions :]
        versions = registry.versions()
        running = running_runs | {
            v.run_id
            for v in versions
            if v.run_id and _run_status(registry, v.run_id) in ("RUNNING", "SCHEDULED")
        }
        keep = versions_to_keep(
            versions, registry.aliases(), stack, last_champions(registry, retention.keep_champions),
            running, retention.keep_versions,
        )  # fmt: skip
        doomed = sorted((str(v.version) for v in versions if str(v.version) not in keep), key=int)
        for number in doomed if not dry_run else []:
            registry.lock.assert_held()  # fencing: a slow MLflow must not let a promotion pick it meanwhile
            registry.call(
                lambda n=number: client.delete_model_version(registry.name, n), f"delete version {number}"
            )
    return doomed


def _run_status(registry: Registry, run_id: str) -> str | None:
    from mlflow.exceptions import MlflowException

    try:
        return registry.call(lambda: registry.client.get_run(run_id).info.status, f"read run {run_id}")
    except MlflowException:
        return None  # the run is gone: nothing is running
