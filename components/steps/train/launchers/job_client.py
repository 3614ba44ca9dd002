"""A Kubeflow training job as an API object: its kind (``JobAPI``), and create, get, delete and watch it with retries.

``KubeflowJobClient`` is what the job launcher (kubeflow.py) stands on: the namespace the job goes to (the
step pod's own), the API client, transient API errors retried with backoff, and ``_follow``, a watch of the job
until it is terminal that falls back to polling when watches keep failing and gives up at the deadline. Deciding
what to do with the job (create or re-attach, restart all ranks on a failure, delete on SIGTERM) is the launcher's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ctpipe.components.lib.config import Config, KubernetesConfig
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.kube.api import default_api_client
from ctpipe.components.lib.kube.job_status import job_phase, jobs_progress
from ctpipe.components.lib.kube.namespace import resolve_namespace
from ctpipe.components.lib.kube.retry import is_transient, retry_call
from ctpipe.components.steps.train.launchers.base import WorkerLaunch


class JobDeadlineExceeded(Exception):
    """The launcher's own wait ran past the job's deadline plus grace."""


@dataclass(frozen=True)
class JobAPI:
    """What differs between the Kubeflow job kinds a launcher can submit and follow."""

    group: str
    version: str
    plural: str
    kind: str
    build: Callable[[KubernetesConfig, WorkerLaunch], dict[str, Any]]
    validate: Callable[[dict[str, Any]], None]
    container: str  # the trainer container whose log is streamed
    rank0_selector: Callable[[str], str]
    pods_selector: Callable[[str], str]
    rank0_label: tuple[str, str]  # how to recognise the rank-0 pod among failed ones


class KubeflowJobClient:
    """One kind of Kubeflow training job (``api``) in the step's namespace, reached with retries."""

    api: JobAPI  # set by each job API's launcher class

    def __init__(
        self,
        config: Config,
        *,
        api_client: client.ApiClient | None = None,
        namespace: str | None = None,
        emit: Callable[[str], None] | None = None,
        poll_seconds: float = 5.0,
        watch_seconds: int = 60,
        grace_seconds: float = 60.0,
        retry_attempts: int = 6,
        backoff_seconds: float = 1.0,
        log_tail_lines: int = 30,
    ) -> None:
        self.kube = config.kubernetes
        self._namespace = namespace  # None: resolved on first use (the step pod's own, see kube/namespace.py)
        self._api_client = api_client
        self.emit = emit or (lambda line: print(line, flush=True))
        self.poll_seconds = poll_seconds
        self.watch_seconds = watch_seconds
        self.grace_seconds = grace_seconds
        self.retry_attempts = retry_attempts
        self.backoff_seconds = backoff_seconds
        self.log_tail_lines = log_tail_lines
        self._last_progress = ""

    @property
    def namespace(self) -> str:
        """Where the job goes: the train step pod's own namespace (a configured one must equal it)."""
        if self._namespace is None:
            self._namespace = resolve_namespace(self.kube.namespace)
        return self._namespace

    # --- API access ----------------------------------------------------------------------------

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client = default_api_client()
        return self._api_client

    def _retry(self, call: Callable[[], Any]) -> Any:
        return retry_call(
            call, attempts=self.retry_attempts, backoff_seconds=self.backoff_seconds, on_retry=self.emit
        )

    def _custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def _where(self) -> tuple[str, str, str, str]:
        return self.api.group, self.api.version, self.namespace, self.api.plural

    def _get(self, name: str) -> dict[str, Any] | None:
        try:
            return self._retry(lambda: self._custom().get_namespaced_custom_object(*self._where(), name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def _create(self, job: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self._retry(
                lambda: self._custom().create_namespaced_custom_object(
                    *self._where(), job, field_validation="Strict"
                )
            )
        except ApiException as err:
            if err.status == 409:  # created by a concurrent attempt: attach to it
                return None
            raise

    def _delete(self, name: str) -> None:
        try:
            retry_call(
                lambda: self._custom().delete_namespaced_custom_object(
                    *self._where(), name, propagation_policy="Background"
                ),
                attempts=3,
                backoff_seconds=min(self.backoff_seconds, 1.0),
                on_retry=self.emit,
            )
            self.emit(f"deleted {self.api.kind} {self.namespace}/{name}")
        except ApiException as err:
            if err.status != 404:
                self.emit(
                    f"could not delete {self.api.kind} {self.namespace}/{name}: {err.status} {err.reason}"
                )

    def _wait_gone(self, name: str, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while self._get(name) is not None:
            if time.monotonic() > end:
                raise TrainingError(
                    f"{self.api.kind} {self.namespace}/{name} was not deleted within {timeout:.0f}s"
                )
            time.sleep(min(self.poll_seconds, 2.0))

    # --- watching ------------------------------------------------------------------------------

    def _follow(self, name: str, deadline_at: float) -> dict[str, Any]:
        """Watch the job until it is terminal; fall back to polling when watches keep failing."""
        resource_version: str | None = None
        failures = 0
        phase = ""
        while True:
            remaining = deadline_at - time.monotonic()
            if remaining <= 0:
                raise JobDeadlineExceeded()
            if failures >= 3:
                job = self._get(name)
                if job is None:
                    raise TrainingError(
                        f"{self.api.kind} {self.namespace}/{name} disappeared (deleted by someone else?)"
                    )
                phase = self._report(job, phase)
                if phase in ("Succeeded", "Failed"):
                    return job
                time.sleep(min(self.poll_seconds, max(remaining, 0.01)))
                continue
            try:
                for event in watch.Watch().stream(
                    self._custom().list_namespaced_custom_object,
                    *self._where(),
                    field_selector=f"metadata.name={name}",
                    resource_version=resource_version,
                    timeout_seconds=max(1, int(min(remaining, self.watch_seconds))),
                    _request_timeout=(10, min(remaining, self.watch_seconds) + 10),
                ):
                    job = event["object"]
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        raise TrainingError(
                            f"{self.api.kind} {self.namespace}/{name} was deleted while the step waited"
                        )
                    resource_version = (job.get("metadata") or {}).get("resourceVersion") or resource_version
                    failures = 0
                    phase = self._report(job, phase)
                    if phase in ("Succeeded", "Failed"):
                        return job
                    if time.monotonic() >= deadline_at:
                        raise JobDeadlineExceeded()
            except ApiException as err:
                if err.status == 410:  # resourceVersion too old: re-list from now
                    resource_version = None
                    continue
                if not is_transient(err) and err.status not in (404, 405):
                    raise
                failures += 1
                self.emit(
                    f"watch on {self.api.kind} {name} failed ({err.status}); {'retrying' if failures < 3 else 'polling'}"
                )
                time.sleep(min(self.backoff_seconds * 2**failures, 30.0))
            except Exception as err:
                if not is_transient(err):
                    raise
                failures += 1
                self.emit(f"watch on {self.api.kind} {name} dropped ({type(err).__name__}); reconnecting")
                time.sleep(min(self.backoff_seconds * 2**failures, 30.0))

    def _report(self, job: dict[str, Any], previous: str) -> str:
        phase = job_phase(job)
        progress = jobs_progress(job)  # a TrainJob has no Running condition: its pods' counts are the news
        if phase != previous or progress != self._last_progress:
            self.emit(f"{self.api.kind} {self.namespace}/{job['metadata']['name']}: {phase}"
                      + (f" ({progress})" if progress else ""))
        self._last_progress = progress
        return phase
