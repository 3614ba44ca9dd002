"""Deliver the pipeline to Kubeflow Pipelines: upload a new version, keep one recurring run.

    ctpipe deploy --host https://kfp.example.com --schedule "0 0 3 * * *"

Deploying is idempotent: a pipeline version is named after the git commit (``<sha>-dirty-<spec hash>``
for an uncommitted tree), so deploying the same commit twice uploads nothing. Runs and the schedule take the
newest version, so a commit deployed again after a newer one (a rollback) is uploaded again as
``<sha>-redeploy-<UTC time>``. KFP's v2beta1 API has no
update for recurring runs, so "updating" the schedule means deleting it and creating it again with the
same deterministic name; it is created with only the pipeline id (no version id), which KFP (>= 2.5,
kubeflow/pipelines#11560) resolves to the latest pipeline version at every trigger, so new versions
need no schedule change. Starting runs is ``kfp_runs.py``; the connection is ``kfp_client.py``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.continuous_training import PIPELINE_NAME
from ctpipe.pipelines.deploy.kfp_client import (
    DEFAULT_EXPERIMENT,
    connect,
    find_pipeline_id,
    find_recurring_runs,
    find_version,
    latest_version,
)

# The suffix of a commit's version uploaded again to become the latest (a rollback to an older commit).
REDEPLOY_MARK = "-redeploy-"

# ``deploy.connect`` stays importable for the commands that connect through this module.
__all__ = ["DeployResult", "connect", "default_version_name", "deploy", "ensure_schedule", "upload", "validate_cron"]

_FIELD_RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
_FIELD_NAMES = ["second", "minute", "hour", "day of month", "month", "day of week"]
_NAMES = {
    4: {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
    5: {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())},
}


@dataclass
class DeployResult:
    """What a deploy did: ids, and whether anything was created."""

    pipeline_id: str
    version_id: str
    version_name: str
    experiment_id: str
    created_pipeline: bool = False
    created_version: bool = False
    schedule: dict[str, Any] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.created_pipeline or self.created_version or self.schedule.get("action") in ("created", "updated")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "changed": self.changed}


def deploy(
    client,
    package_path: str,
    *,
    version_name: str,
    pipeline_name: str = PIPELINE_NAME,
    experiment: str = DEFAULT_EXPERIMENT,
    namespace: str | None = None,
    schedule: str | None = None,
    service_account: str | None = None,
    schedule_parameters: dict[str, Any] | None = None,
) -> DeployResult:
    """Upload the compiled pipeline as ``version_name`` and, with ``schedule``, keep its recurring run."""
    pipeline_id, version, created_pipeline, created_version = upload(
        client, package_path, pipeline_name=pipeline_name, version_name=version_name, namespace=namespace
    )
    kfp_experiment = client.create_experiment(experiment, namespace=namespace)
    experiment_id = kfp_experiment.experiment_id
    result = DeployResult(
        pipeline_id=pipeline_id,
        version_id=version.pipeline_version_id,
        version_name=version.display_name,
        experiment_id=experiment_id,
        created_pipeline=created_pipeline,
        created_version=created_version,
        schedule={"action": "none"},
    )
    if schedule:
        result.schedule = ensure_schedule(
            client,
            experiment_id=experiment_id,
            pipeline_id=pipeline_id,
            name=schedule_name(pipeline_name),
            cron=validate_cron(schedule),
            parameters={**(schedule_parameters or {}), "trigger": "schedule"},
            service_account=service_account,
            namespace=kfp_experiment.namespace or namespace,
        )
    return result


def schedule_name(pipeline_name: str) -> str:
    return f"{pipeline_name}-schedule"


def upload(client, package_path: str, *, pipeline_name: str, version_name: str, namespace: str | None = None):
    """Create the pipeline the first time, then upload ``version_name`` unless it exists; (ids, created flags)."""
    pipeline_id = find_pipeline_id(client, pipeline_name, namespace)
    created_pipeline = pipeline_id is None
    if created_pipeline:
        # KFP stores the uploaded spec as the pipeline's first version, named after the pipeline.
        pipeline = client.upload_pipeline(
            package_path, pipeline_name=pipeline_name, description="ctpipe continuous training", namespace=namespace
        )
        pipeline_id = pipeline.pipeline_id
    version = find_version(client, pipeline_id, version_name)
    upload_name = version_name
    if version is not None and not created_pipeline:
        # Runs and the schedule take the newest version: an older commit deployed again (a rollback) must be
        # uploaded again to become it; "already deployed" would leave the newer commit running.
        latest = latest_version(client, pipeline_id)
        if latest.display_name.startswith(f"{version_name}{REDEPLOY_MARK}"):
            version = latest
        elif latest.pipeline_version_id != version.pipeline_version_id and not _same_second(version, latest):
            # (KFP keeps created_at in whole seconds: a version uploaded in the newest one is one of the latest.)
            version = None
            upload_name = f"{version_name}{REDEPLOY_MARK}{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}"
    created_version = version is None
    if created_version:
        version = client.upload_pipeline_version(
            package_path, pipeline_version_name=upload_name, pipeline_id=pipeline_id, description=f"ctpipe {version_name}"
        )
    return pipeline_id, version, created_pipeline, created_version


def _same_second(version, latest) -> bool:
    return version.created_at is not None and latest.created_at is not None and version.created_at >= latest.created_at


def ensure_schedule(
    client,
    *,
    experiment_id: str,
    pipeline_id: str,
    name: str,
    cron: str,
    parameters: dict[str, Any],
    service_account: str | None,
    namespace: str | None = None,
) -> dict[str, Any]:
    """One enabled recurring run ``name`` following the latest pipeline version; recreate it when it differs."""
    import kfp_server_api as api

    # Looked up in the whole namespace: one left in an experiment deployed to before would go on firing.
    existing = find_recurring_runs(client, name, namespace)
    for run in existing:
        ref = run.pipeline_version_reference
        same = (
            run.experiment_id == experiment_id
            and run.trigger is not None
            and run.trigger.cron_schedule is not None
            and run.trigger.cron_schedule.cron == cron
            and int(run.max_concurrency or 0) == 1
            and bool(run.no_catchup)
            and str(run.mode) == "ENABLE"
            and ref is not None
            and ref.pipeline_id == pipeline_id
            and not ref.pipeline_version_id
            and (run.runtime_config.parameters if run.runtime_config else {}) == parameters
            and (run.service_account or None) == (service_account or None)
        )
        if same and len(existing) == 1:
            return {"action": "unchanged", "id": run.recurring_run_id, "name": name, "cron": cron}
    for run in existing:
        # No update in the v2beta1 API: stop the old one first so it cannot fire while being replaced.
        client.disable_recurring_run(run.recurring_run_id)
        client.delete_recurring_run(run.recurring_run_id)
    body = api.V2beta1RecurringRun(
        display_name=name,
        description="ctpipe scheduled retraining (follows the latest pipeline version)",
        experiment_id=experiment_id,
        mode=api.RecurringRunMode.ENABLE,
        # No pipeline_version_id: KFP resolves the latest version at every trigger.
        pipeline_version_reference=api.V2beta1PipelineVersionReference(pipeline_id=pipeline_id),
        runtime_config=api.V2beta1RuntimeConfig(parameters=parameters),
        trigger=api.V2beta1Trigger(cron_schedule=api.V2beta1CronSchedule(cron=cron)),
        max_concurrency=1,
        no_catchup=True,
        service_account=service_account or None,
    )
    created = client.recurring_runs.recurring_run_service_create_recurring_run(recurring_run=body)
    return {"action": "updated" if existing else "created", "id": created.recurring_run_id, "name": name, "cron": cron}


# --- inputs: cron and version name ----------------------------------------------------------


def validate_cron(expression: str) -> str:
    """Check a 6-field (robfig, seconds first) cron expression; return it normalised."""
    fields = expression.split()
    example = "'0 0 3 * * *' (every day at 03:00:00)"
    if len(fields) != 6:
        raise UserError(
            f"--schedule '{expression}' has {len(fields)} fields; KFP recurring runs take 6 (second minute hour "
            f"day-of-month month day-of-week), e.g. {example}."
        )
    for index, text in enumerate(fields):
        low, high = _FIELD_RANGES[index]
        for part in text.split(","):
            base, _, step = part.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                raise UserError(f"--schedule '{expression}': the {_FIELD_NAMES[index]} step '/{step}' must be a positive number.")
            if base in ("*", "?") and (base == "*" or index in (3, 5)):
                continue
            for bound in base.split("-", 1):
                value = _NAMES.get(index, {}).get(bound.upper()) if not bound.isdigit() else int(bound)
                if value is None or not low <= value <= high:
                    raise UserError(
                        f"--schedule '{expression}': '{part}' is not a valid {_FIELD_NAMES[index]} "
                        f"({low}-{high}, '*', ranges a-b, lists a,b and steps */n); e.g. {example}."
                    )
    return " ".join(fields)


def git_version(repo_dir: str | Path = ".") -> tuple[str | None, bool]:
    """The short commit of ``repo_dir`` and whether tracked files have uncommitted changes."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=repo_dir, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo_dir, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None, False
    return sha or None, bool(status)


def spec_hash(package_path: str | Path) -> str:
    return hashlib.sha256(Path(package_path).read_bytes()).hexdigest()[:12]


def default_version_name(package_path: str | Path, repo_dir: str | Path = ".") -> str:
    """The git commit; ``-dirty-<spec hash>`` when the tree has changes; the spec hash outside git."""
    sha, dirty = git_version(repo_dir)
    if sha is None:
        return f"spec-{spec_hash(package_path)}"
    return f"{sha}-dirty-{spec_hash(package_path)}" if dirty else sha
