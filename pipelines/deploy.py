"""Deliver the pipeline to Kubeflow Pipelines: upload versions, keep one schedule, start runs.

    ctpipe deploy --host https://kfp.example.com --schedule "0 0 3 * * *"
    ctpipe submit --host https://kfp.example.com --trigger manual --set train.max_steps=500

Everything goes through the real ``kfp.Client`` (v2beta1 API). Deploying is idempotent: a pipeline
version is named after the git commit (``<sha>-dirty-<spec hash>`` for an uncommitted tree), so deploying
the same commit twice uploads nothing. KFP's v2beta1 API has no update for recurring runs, so "updating"
the schedule means deleting it and creating it again with the same deterministic name; it is created
with only the pipeline id (no version id), which KFP (>= 2.5, kubeflow/pipelines#11560) resolves to the
latest pipeline version at every trigger, so new versions need no schedule change. Credentials come from
``KFP_TOKEN`` / ``--token-file`` / ``KFP_COOKIES``, never from the command line.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from components.errors import UserError
from pipelines.continuous_training import PIPELINE_NAME

DEFAULT_EXPERIMENT = "ctpipe"
ACTIVE_RUN_STATES = {"PENDING", "RUNNING", "PAUSED", "CANCELING", "RUNTIME_STATE_UNSPECIFIED"}
# kfp.Client.wait_for_run_completion misses CANCELED (it would wait until its timeout): we poll ourselves.
FINAL_RUN_STATES = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"}
_FIELD_RANGES = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
_FIELD_NAMES = ["second", "minute", "hour", "day of month", "month", "day of week"]
_NAMES = {
    4: {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
    5: {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())},
}


# --- inputs: cron, version name, credentials ---------------------------------------------------


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


def read_token(token_file: str | None = None) -> str | None:
    """The KFP bearer token from ``--token-file`` or ``$KFP_TOKEN`` (never a command-line value)."""
    if token_file:
        path = Path(token_file)
        if not path.is_file():
            raise UserError(f"--token-file '{token_file}' does not exist; give a file holding the KFP bearer token.")
        return path.read_text().strip() or None
    return os.environ.get("KFP_TOKEN") or None


def _preflight(host: str, token: str | None, cookies: str | None) -> None:
    """One healthz request, so bad credentials or a wrong host fail at once (kfp.Client retries 5 x 5 s)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{host.rstrip('/')}/apis/v2beta1/healthz")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if cookies:
        request.add_header("Cookie", cookies)
    try:
        with urllib.request.urlopen(request, timeout=15):
            return
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise UserError(
                f"the KFP API at {host} refused the credentials (HTTP {err.code}). Put a valid bearer token in "
                "$KFP_TOKEN or a file given to --token-file (or session cookies in $KFP_COOKIES)."
            ) from None
        # Other statuses (a proxy without healthz, say) are left to the client to judge.
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"cannot reach the KFP API at {host}: {getattr(err, 'reason', err)}. Check --host (e.g. "
            "http://localhost:8888 after 'kubectl port-forward svc/ml-pipeline 8888') and the network."
        ) from None


def connect(host: str, *, namespace: str | None = None, token_file: str | None = None):
    """A ``kfp.Client`` for ``host`` with the token or cookies from the environment (contacts the server)."""
    if not re.match(r"^https?://", host):
        raise UserError(f"--host '{host}' must be an http:// or https:// URL of the KFP API, e.g. http://localhost:8888")
    token, cookies = read_token(token_file), os.environ.get("KFP_COOKIES") or None
    _preflight(host, token, cookies)
    import kfp

    kwargs: dict[str, Any] = {"host": host, "existing_token": token, "cookies": cookies}
    if namespace:
        kwargs["namespace"] = namespace
    try:
        return kfp.Client(**kwargs)
    except Exception as err:  # the constructor calls healthz; connection errors come in many types
        raise UserError(f"cannot reach the KFP API at {host}: {type(err).__name__}: {str(err)[:300]}") from None


# --- lookups -----------------------------------------------------------------------------------


def _equals(key: str, value: str) -> str:
    return json.dumps({"predicates": [{"operation": "EQUALS", "key": key, "stringValue": value}]})


def find_pipeline_id(client, name: str, namespace: str | None = None) -> str | None:
    """The id of pipeline ``name``: in ``namespace`` first (multi-user KFP), then among shared pipelines."""
    for scope in ([namespace] if namespace else []) + [None]:
        found = client.list_pipelines(page_size=10, filter=_equals("display_name", name), namespace=scope)
        for pipeline in found.pipelines or []:
            if pipeline.display_name == name:
                return pipeline.pipeline_id
    return None


def find_version(client, pipeline_id: str, version_name: str):
    """The pipeline version named ``version_name``, or None."""
    found = client.list_pipeline_versions(pipeline_id, page_size=10, filter=_equals("display_name", version_name))
    for version in found.pipeline_versions or []:
        if version.display_name == version_name:
            return version
    return None


def latest_version(client, pipeline_id: str):
    """The newest version of a pipeline (by creation time)."""
    found = client.list_pipeline_versions(pipeline_id, page_size=1, sort_by="created_at desc")
    versions = found.pipeline_versions or []
    if not versions:
        raise UserError(f"pipeline {pipeline_id} has no versions; run 'ctpipe deploy' first.")
    return versions[0]


def find_recurring_runs(client, experiment_id: str, name: str) -> list:
    found = client.list_recurring_runs(experiment_id=experiment_id, page_size=100, filter=_equals("display_name", name))
    return [r for r in found.recurring_runs or [] if r.display_name == name]


def find_runs(client, experiment_id: str, name: str) -> list:
    found = client.list_runs(experiment_id=experiment_id, page_size=100, filter=_equals("display_name", name))
    return [r for r in found.runs or [] if r.display_name == name]


# --- deploy ------------------------------------------------------------------------------------


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
    created_version = version is None
    if created_version:
        version = client.upload_pipeline_version(
            package_path, pipeline_version_name=version_name, pipeline_id=pipeline_id, description=f"ctpipe {version_name}"
        )
    return pipeline_id, version, created_pipeline, created_version


def ensure_schedule(
    client,
    *,
    experiment_id: str,
    pipeline_id: str,
    name: str,
    cron: str,
    parameters: dict[str, Any],
    service_account: str | None,
) -> dict[str, Any]:
    """One enabled recurring run ``name`` following the latest pipeline version; recreate it when it differs."""
    import kfp_server_api as api

    existing = find_recurring_runs(client, experiment_id, name)
    for run in existing:
        ref = run.pipeline_version_reference
        same = (
            run.trigger is not None
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
    experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    result = DeployResult(
        pipeline_id=pipeline_id,
        version_id=version.pipeline_version_id,
        version_name=version_name,
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
        )
    return result


# --- runs --------------------------------------------------------------------------------------


def run_parameters(
    *, trigger: str, data_uri: str | None, overrides: list[str], config_json: str | None, extra: dict[str, str]
) -> dict[str, Any]:
    """The pipeline parameters of a run: trigger, data, config and ``--set`` overrides (one per line)."""
    params: dict[str, Any] = dict(extra)
    params["trigger"] = trigger
    if data_uri:
        params["data_uri"] = data_uri
    if overrides:
        params["config_overrides"] = "\n".join(overrides)
    if config_json:
        params["config_json"] = config_json
    return params


def default_run_name(trigger: str) -> str:
    return f"ctpipe-{trigger}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}"


def submit_run(
    client,
    *,
    parameters: dict[str, Any],
    run_name: str,
    pipeline_name: str = PIPELINE_NAME,
    experiment: str = DEFAULT_EXPERIMENT,
    namespace: str | None = None,
    service_account: str | None = None,
    reuse_existing: bool = False,
):
    """Create a run of the latest deployed version; with ``reuse_existing``, return a run of that name instead."""
    pipeline_id = find_pipeline_id(client, pipeline_name, namespace)
    if pipeline_id is None:
        raise UserError(
            f"pipeline '{pipeline_name}' is not deployed on this KFP host; run 'ctpipe deploy --host URL' first."
        )
    experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    if reuse_existing:
        for run in find_runs(client, experiment_id, run_name):
            return run
    version = latest_version(client, pipeline_id)
    return client.run_pipeline(
        experiment_id=experiment_id,
        job_name=run_name,
        params=parameters,
        pipeline_id=pipeline_id,
        version_id=version.pipeline_version_id,
        service_account=service_account or None,
    )


def run_is_active(client, run_id: str) -> bool:
    """Whether a KFP run is still pending or running."""
    state = client.get_run(run_id).state
    return str(state or "RUNTIME_STATE_UNSPECIFIED").upper() in ACTIVE_RUN_STATES


def wait_for_run(client, run_id: str, *, timeout: float, poll_seconds: float = 5.0) -> str:
    """Poll a KFP run until it ends; return its final state, or raise UserError after ``timeout`` seconds."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        state = str(client.get_run(run_id).state or "RUNTIME_STATE_UNSPECIFIED").upper()
        if state in FINAL_RUN_STATES:
            return state
        if time.monotonic() > deadline:
            raise UserError(f"KFP run {run_id} is still {state} after {timeout:.0f} s; see it in the KFP UI.")
        time.sleep(poll_seconds)
