"""Start pipeline runs on Kubeflow Pipelines and follow them: parameters, submit, state, wait.

    client = connect(host); run = submit_run(client, parameters=run_parameters(...), run_name=...)

``ctpipe submit`` and the triggers (``ctpipe watch``) start runs of the latest deployed version here.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

from ctpipe.components.lib.config import REPRODUCE_TRIGGER
from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.continuous_training import PIPELINE_NAME
from ctpipe.pipelines.deploy.kfp_client import DEFAULT_EXPERIMENT, find_pipeline_id, find_runs, latest_version

# Waits before asking again to create a run after a 5xx, 429 or dropped connection (then the error stands).
CREATE_RETRY_SECONDS = (2.0, 10.0)
ACTIVE_RUN_STATES = {"PENDING", "RUNNING", "PAUSED", "CANCELING", "RUNTIME_STATE_UNSPECIFIED"}
# kfp.Client.wait_for_run_completion misses CANCELED (it would wait until its timeout): we poll ourselves.
FINAL_RUN_STATES = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED"}


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
    """Create a run of the latest deployed version; with ``reuse_existing``, return a run of that name that is
    still going or succeeded instead."""
    pipeline_id = find_pipeline_id(client, pipeline_name, namespace)
    if pipeline_id is None:
        raise UserError(
            f"pipeline '{pipeline_name}' is not deployed on this KFP host; run 'ctpipe deploy --host URL' first."
        )
    experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    if reuse_existing:
        # A run of that name that is going (or succeeded) is this run: re-attach. A failed or cancelled one is
        # history: whoever asks for the run again (a watcher's record deleted to start it again) gets a new one.
        runs = {str(r.state or "RUNTIME_STATE_UNSPECIFIED").upper(): r for r in find_runs(client, experiment_id, run_name)}
        for state in (*ACTIVE_RUN_STATES, "SUCCEEDED"):
            if state in runs:
                return runs[state]
    version = latest_version(client, pipeline_id)
    before = {r.run_id for r in find_runs(client, experiment_id, run_name)}
    for wait in (*CREATE_RETRY_SECONDS, None):
        try:
            return client.run_pipeline(
                experiment_id=experiment_id,
                job_name=run_name,
                params=parameters,
                pipeline_id=pipeline_id,
                version_id=version.pipeline_version_id,
                service_account=service_account or None,
            )
        except Exception as err:
            if wait is None or not is_transient(err):
                raise
            time.sleep(wait)
            # A gateway may time out on a request the server carried out: a new run of that name is this one.
            created = [r for r in find_runs(client, experiment_id, run_name) if r.run_id not in before]
            if created:
                return created[0]
    raise AssertionError("unreachable")


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
    # KFP stores a run's parameters in its records and shows them to everyone who can list runs.
    for name, value in params.items():
        if isinstance(value, str) and "://" in value:  # a URI, or overrides and config JSON that hold one
            refuse_uri_credentials(value, name=f"run parameter '{name}'", recorded_in="KFP keeps a run's parameters "
                                   "in its records, visible to everyone who can list runs")
    return params


def reproduction_parameters(*, config_json: str, data_uri: str, data_fingerprint: str) -> dict[str, Any]:
    """The parameters of a run that rebuilds a registered version: trigger ``reproduce`` (its register step compares
    and records, never registers), the version's recorded config and data, and the recorded data fingerprint (the
    run stops in its first step when the data there is no longer that data)."""
    return run_parameters(trigger=REPRODUCE_TRIGGER, data_uri=data_uri, overrides=[], config_json=config_json,
                          extra={"data_fingerprint": data_fingerprint})


def default_run_name(trigger: str) -> str:
    """A run name that says why and when it started, e.g. ``ctpipe-manual-20250101-030000``."""
    return f"ctpipe-{trigger}-{dt.datetime.now(dt.UTC).strftime('%Y%m%d-%H%M%S')}"


def run_state(run) -> str:
    """A KFP run's state, with a run that an operator terminated as CANCELED: KFP 2.17 on Argo reports one as
    CANCELING, then FAILED (Argo has no cancelled phase), so only its state history tells it apart."""
    state = str(run.state or "RUNTIME_STATE_UNSPECIFIED").upper()
    if state == "FAILED" and any(str(s.state or "").upper() == "CANCELING" for s in run.state_history or []):
        return "CANCELED"
    return state


def run_is_active(client, run_id: str) -> bool:
    """Whether a KFP run is still pending or running."""
    state = client.get_run(run_id).state
    return str(state or "RUNTIME_STATE_UNSPECIFIED").upper() in ACTIVE_RUN_STATES


def wait_for_run(client, run_id: str, *, timeout: float, poll_seconds: float = 5.0) -> str:
    """Poll a KFP run until it ends; return its final state, or raise UserError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    state = "unknown"
    while True:
        try:
            state = run_state(client.get_run(run_id))
        except Exception as err:
            # A wait of hours outlives API server restarts and gateway hiccups: those are asked again until the
            # deadline; a refusal (401, 403, 404) ends it at once.
            if not is_transient(err) or time.monotonic() > deadline:
                raise
        if state in FINAL_RUN_STATES:
            return state
        if time.monotonic() > deadline:
            raise UserError(f"KFP run {run_id} is still {state} after {timeout:.0f} s; see it in the KFP UI.")
        time.sleep(poll_seconds)


def is_transient(err: Exception) -> bool:
    """Whether a KFP API error may pass by itself: a 5xx or 429 answer, or a dropped or refused connection."""
    import urllib3
    from kfp_server_api.exceptions import ApiException

    if isinstance(err, ApiException):
        return err.status is not None and (err.status >= 500 or err.status == 429)
    return isinstance(err, urllib3.exceptions.HTTPError | ConnectionError)
