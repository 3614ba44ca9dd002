"""A Kubeflow training job as an API object: its kind (``JobAPI``), and create, get, delete and watch it with retries.

``KubeflowJobClient`` is what the job launcher (kubeflow.py) stands on: the namespace the job goes to (the
step pod's own), the API client, and the jobs of its kind as ``lib/kube/objects.py``'s ``CustomObjects`` (the
validate step's SparkApplications go through the same): transient API errors retried with backoff, and ``_follow``,
a watch of the job until it is terminal that falls back to polling when watches keep failing and gives up at the
deadline. Deciding what to do with the job (create or re-attach, restart all ranks on a failure, delete on SIGTERM)
is the launcher's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from ctpipe.components.lib.config import Config, KubernetesConfig
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.kube.api import default_api_client
from ctpipe.components.lib.kube.job_status import job_phase, jobs_progress
from ctpipe.components.lib.kube.namespace import resolve_namespace
from ctpipe.components.lib.kube.objects import CustomObjects, DeadlineExceeded, ObjectGone
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
        self._objects: CustomObjects | None = None

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

    @property
    def objects(self) -> CustomObjects:
        """The jobs of this kind in the step's namespace, reached as the validate step reaches its SparkApplication
        (``lib/kube/objects.py``: retries, strict create, delete, and the watch that polls when watches fail)."""
        if self._objects is None:
            self._objects = CustomObjects(
                self.api_client, group=self.api.group, version=self.api.version, plural=self.api.plural,
                kind=self.api.kind, namespace=self.namespace, emit=self.emit, retry_attempts=self.retry_attempts,
                backoff_seconds=self.backoff_seconds, poll_seconds=self.poll_seconds, watch_seconds=self.watch_seconds,
            )
        return self._objects

    def _get(self, name: str) -> dict[str, Any] | None:
        return self.objects.get(name)

    def _create(self, job: dict[str, Any]) -> dict[str, Any] | None:
        """The created job, or None when one of that name exists (created by a concurrent attempt: attach to it)."""
        return self.objects.create(job)

    def _delete(self, name: str) -> None:
        self.objects.delete(name)

    def _wait_gone(self, name: str, timeout: float = 120.0) -> None:
        try:
            self.objects.wait_gone(name, timeout)
        except RuntimeError as err:
            raise TrainingError(str(err)) from err

    # --- watching ------------------------------------------------------------------------------

    def _follow(self, name: str, deadline_at: float) -> dict[str, Any]:
        """Watch the job until it is terminal (Succeeded or Failed), reporting its phase and its pods' progress."""
        phase = ""

        def report(job: dict[str, Any]) -> None:
            nonlocal phase
            phase = self._report(job, phase)

        try:
            return self.objects.follow(name, deadline_at, terminal=lambda job: job_phase(job) in ("Succeeded", "Failed"),
                                       report=report)
        except DeadlineExceeded as err:
            raise JobDeadlineExceeded() from err
        except ObjectGone as err:
            raise TrainingError(str(err)) from err

    def _report(self, job: dict[str, Any], previous: str) -> str:
        phase = job_phase(job)
        progress = jobs_progress(job)  # a TrainJob has no Running condition: its pods' counts are the news
        if phase != previous or progress != self._last_progress:
            self.emit(f"{self.api.kind} {self.namespace}/{job['metadata']['name']}: {phase}"
                      + (f" ({progress})" if progress else ""))
        self._last_progress = progress
        return phase
