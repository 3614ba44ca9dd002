"""A ``kfp.Client`` for a KFP host, with credentials from the environment, and lookups by display name.

    client = connect("https://kfp.example.com", namespace="team")   # token from $KFP_TOKEN or --token-file

Everything goes through the real ``kfp.Client`` (v2beta1 API). Credentials come from ``--token-file`` /
``KFP_TOKEN`` / ``KF_PIPELINES_SA_TOKEN_PATH`` / ``KFP_COOKIES``, never from the command line. Deploying (``deploy.py``) and starting
runs (``kfp_runs.py``) both connect here.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import UserError

DEFAULT_EXPERIMENT = "ctpipe"


def connect(host: str, *, namespace: str | None = None, token_file: str | None = None):
    """A ``kfp.Client`` for ``host`` with the token or cookies from the environment (contacts the server)."""
    # Before the host is echoed in any message (and a token in it kept in KFP's client configuration).
    refuse_uri_credentials(host, name="--host", recorded_in="it is echoed in messages and logs")
    if not re.match(r"^https?://", host):
        raise UserError(f"--host '{host}' must be an http:// or https:// URL of the KFP API, e.g. http://localhost:8888")
    token, cookies = read_token(token_file), os.environ.get("KFP_COOKIES") or None
    _preflight(host, token, cookies)
    # The client's own module, not the package's attribute: a process that ran a pipeline locally imported kfp
    # without its client (pipelines/local/kfp_local_patches.py), so `kfp.Client` is absent there.
    from kfp.client import Client

    kwargs: dict[str, Any] = {"host": host, "existing_token": token, "cookies": cookies}
    path = token_path(token_file)
    if path is not None and token:
        # A file's token is read again before every request: the kubelet rotates a projected service-account
        # token (ours expires after an hour), and a watcher loop or 'submit --wait' outlives one.
        from kfp.client.set_volume_credentials import ServiceAccountTokenVolumeCredentials

        kwargs.update(existing_token=None, credentials=ServiceAccountTokenVolumeCredentials(path=str(path)))
    if namespace:
        kwargs["namespace"] = namespace
    try:
        return Client(**kwargs)
    except Exception as err:  # the constructor calls healthz; connection errors come in many types
        raise UserError(f"cannot reach the KFP API at {host}: {type(err).__name__}: {str(err)[:300]}") from None


def read_token(token_file: str | None = None) -> str | None:
    """The KFP bearer token from ``--token-file``, ``$KFP_TOKEN`` or ``$KF_PIPELINES_SA_TOKEN_PATH`` (never a
    command-line value)."""
    if token_file:
        path = Path(token_file)
        if not path.is_file():
            raise UserError(f"--token-file '{token_file}' does not exist; give a file holding the KFP bearer token.")
        return path.read_text().strip() or None
    if os.environ.get("KFP_TOKEN"):
        return os.environ["KFP_TOKEN"]
    path = token_path(None)
    return (path.read_text().strip() or None) if path is not None else None


def token_path(token_file: str | None) -> Path | None:
    """The file the token comes from: ``--token-file``, else (no ``$KFP_TOKEN``) the projected token that a
    Kubeflow PodDefault names in ``$KF_PIPELINES_SA_TOKEN_PATH``, when that file exists."""
    if token_file:
        return Path(token_file)
    sa_path = os.environ.get("KF_PIPELINES_SA_TOKEN_PATH")
    if os.environ.get("KFP_TOKEN") or not sa_path or not Path(sa_path).is_file():
        return None
    return Path(sa_path)


def _preflight(host: str, token: str | None, cookies: str | None) -> None:
    """One healthz request, so bad credentials or a wrong host fail at once (kfp.Client retries 5 x 5 s)."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"{host.rstrip('/')}/apis/v2beta1/healthz")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if cookies:
        request.add_header("Cookie", cookies)
    # urllib would follow a redirect to any host with the Authorization and Cookie headers (an auth proxy
    # sending us to an external login page would get the token): a redirect is left to kfp.Client, whose
    # urllib3 drops those headers on a redirect to another host.
    class _NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(_NoRedirect).open(request, timeout=15):
            return
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise UserError(
                f"the KFP API at {host} refused the credentials (HTTP {err.code}). Put a valid bearer token in "
                "$KFP_TOKEN or a file given to --token-file (or session cookies in $KFP_COOKIES); in a Kubeflow "
                "notebook, $KF_PIPELINES_SA_TOKEN_PATH names the pod's token."
            ) from None
        # Other statuses (a proxy without healthz, say) are left to the client to judge.
    except (urllib.error.URLError, OSError) as err:
        raise UserError(
            f"cannot reach the KFP API at {host}: {getattr(err, 'reason', err)}. Check --host (e.g. "
            "http://localhost:8888 after 'kubectl port-forward svc/ml-pipeline 8888') and the network."
        ) from None


# --- lookups by display name -----------------------------------------------------------------


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


def find_recurring_runs(client, name: str, namespace: str | None = None) -> list:
    """The recurring runs named ``name`` in ``namespace`` (all of them in single-user KFP), in any experiment."""
    found = client.list_recurring_runs(namespace=namespace, page_size=100, filter=_equals("display_name", name))
    return [r for r in found.recurring_runs or [] if r.display_name == name]


def find_runs(client, experiment_id: str, name: str) -> list:
    found = client.list_runs(experiment_id=experiment_id, page_size=100, filter=_equals("display_name", name))
    return [r for r in found.runs or [] if r.display_name == name]
