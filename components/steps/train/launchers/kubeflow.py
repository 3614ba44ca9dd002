"""Launch the worker as a Kubeflow training job and follow it to the end, truthfully (any job API: ``JobAPI``).

What differs between the job kinds (PyTorchJob: launchers/pytorchjob.py, TrainJob: launchers/trainjob.py)
is a ``JobAPI`` value: the object's group, version and kind, how to build and validate it, which pods hold
rank 0 and the trainer container. Everything else is the same for both: reaching and watching the job object
(job_client.py), and here, what to do with it.

Unlike the old KFP pytorch-launcher: the job name is deterministic (a retried step re-attaches),
runPolicy fields sit under ``spec.runPolicy`` and the job is validated strictly before submission,
``Failed`` fails the step with the job's reason and the failing pod's last log lines, the wait follows
the configured deadline, the job is deleted on timeout and on SIGTERM, the Master pod's log is
streamed into the step's log, and transient API errors are retried with backoff. A failed rank fails the
job (no rank restarts alone while its peers wait in a collective): the launcher restarts the whole job,
every rank together from the latest checkpoint, up to ``kubernetes.backoff_limit`` times, unless a rank
exited with the worker's "a restart would repeat this" code or left that verdict in the job's
permanent_failure.json on the shared volume (under a TrainJob, torchrun reports every failure as exit 1).
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client

from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.kube.job_status import created_at, failure_reason, job_phase
from ctpipe.components.lib.kube.logs import LogFollower, failing_pod_tail
from ctpipe.components.lib.kube.names import training_job_name
from ctpipe.components.lib.kube.pod import LAUNCH_ANNOTATION, JobValidationError
from ctpipe.components.lib.kube.staging import Staging, plan_staging, stage_in, stage_out, step_local_paths
from ctpipe.components.steps.train.launchers.base import (
    PERMANENT_FAILURE_EXIT_CODE,
    PERMANENT_FAILURE_FILE,
    PERMANENT_FAILURE_FILE_ENV,
    WorkerLaunch,
    read_permanent_failure,
    sigterm_raises,
)
from ctpipe.components.steps.train.launchers.job_client import JobDeadlineExceeded, KubeflowJobClient

# The job's attempt number (1, 2, ...): a restarted step pod reads it to know how many re-creations are left.
ATTEMPT_ANNOTATION = "ctpipe.io/attempt"


def attempt_of(job: dict[str, Any]) -> int:
    """The attempt number recorded on ``job`` (1 for a job without one: created before attempts were counted)."""
    value = ((job.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION, "1")
    return int(value) if str(value).isdigit() and int(value) >= 1 else 1


def with_attempt(job: dict[str, Any], attempt: int) -> dict[str, Any]:
    """``job`` annotated as attempt ``attempt``."""
    meta = job["metadata"]
    return {**job, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), ATTEMPT_ANNOTATION: str(attempt)}}}


class _Cancelled(BaseException):
    """SIGTERM arrived (KFP cancels a step by terminating its pod); BaseException so no client swallows it."""


class KubeflowJobLauncher(KubeflowJobClient):
    """One Kubeflow training job per launch, created or re-attached, followed to the end (``api`` says which kind;
    API access and the watch: ``KubeflowJobClient``, job_client.py)."""

    # --- the entry point: run ------------------------------------------------------------------

    def run(self, launch: WorkerLaunch) -> None:
        """Create (or re-attach to) the job and follow it; when a rank fails, restart the whole job (every rank
        together, resuming from the latest checkpoint) up to ``kubernetes.backoff_limit`` times; succeed on
        Succeeded, raise TrainingError otherwise."""
        job, staging = self.plan(launch)
        name = job["metadata"]["name"]
        first_created: float | None = None  # one deadline for the step, across restarts
        attempt = 1  # of the job this step creates next; counted on the job itself, across step restarts
        with sigterm_raises(lambda _signum: _Cancelled(), once=True):
            while True:
                follower: LogFollower | None = None
                drain_seconds = 10.0  # how long the log stream may finish after the job ended
                try:
                    created, attempt = self._submit_or_attach(job, staging, launch, attempt)
                    first_created = first_created or created
                    deadline_at = (
                        time.monotonic() + launch.deadline_seconds + self.grace_seconds - (time.time() - first_created)
                    )
                    follower = LogFollower(
                        client.CoreV1Api(self.api_client),
                        self.namespace,
                        name,
                        emit=self.emit,
                        container=self.api.container,
                        selector=self.api.rank0_selector(name),
                        poll_seconds=min(self.poll_seconds, 2.0),
                    )
                    follower.start()
                    final = self._follow(name, deadline_at)
                    if job_phase(final) == "Failed":
                        follower.finish(timeout=drain_seconds)
                        follower = None
                        self._restart_or_raise(name, final, launch, attempt)
                        attempt += 1
                        continue
                except _Cancelled:
                    drain_seconds = 1.0  # KFP's grace period is short: delete first, skip the rest of the log
                    self.emit(f"step cancelled (SIGTERM): deleting {self.api.kind} {self.namespace}/{name}")
                    self._delete(name)
                    raise TrainingError(
                        f"{self.api.kind} {self.namespace}/{name} was cancelled and deleted"
                    ) from None
                except JobDeadlineExceeded:
                    drain_seconds = 1.0
                    self._delete(name)
                    raise TrainingError(
                        f"{self.api.kind} {self.namespace}/{name} did not finish within its deadline of "
                        f"{launch.deadline_seconds}s (+{self.grace_seconds:.0f}s grace); the job was deleted. "
                        "Raise train.deadline_seconds or lower train.max_steps."
                    ) from None
                finally:
                    if follower is not None:
                        follower.finish(timeout=drain_seconds)
                break
        copied = stage_out(staging)
        self.emit(
            f"{self.api.kind} {self.namespace}/{name} succeeded; {len(copied)} files copied back from the shared volume"
        )
        self._clean_up_after(name)

    # --- building ------------------------------------------------------------------------------

    def plan(self, launch: WorkerLaunch) -> tuple[dict[str, Any], Staging]:
        """The validated job for ``launch`` and the staging of its paths onto the shared volume."""
        name = training_job_name(launch.job_name)
        root = self.kube.shared_mount_path if self.kube.shared_pvc else None
        local = step_local_paths(launch.command) if root is None else []
        if local:
            # The worker pods mount only /dev/shm and /tmp then: a job with these paths could only fail.
            raise JobValidationError(
                f"kubernetes.shared_pvc is unset, so the worker pods mount no volume holding the train step's paths "
                f"{', '.join(repr(p) for p in local)}: they exist only in the step's own pod (KFP downloads artifacts "
                "there). Set kubernetes.shared_pvc to a ReadWriteMany PVC of the namespace (manifests/: ctpipe-shared), "
                "or give the worker fsspec URLs its pods can reach."
            )
        staging = plan_staging(launch.command, root, name)
        kube = replace(self.kube, namespace=self.namespace)
        marker = self._permanent_failure_file(name)
        env = launch.env if marker is None else {**launch.env, PERMANENT_FAILURE_FILE_ENV: str(marker)}
        job = self.api.build(kube, replace(launch, command=staging.command, env=env))
        self.api.validate(job)
        return job, staging

    def _permanent_failure_file(self, name: str) -> Path | None:
        """Where a rank reports a failure a restart would repeat: the job's directory on the shared volume."""
        return Path(self.kube.shared_mount_path, "jobs", name, PERMANENT_FAILURE_FILE) if self.kube.shared_pvc else None

    # --- running -------------------------------------------------------------------------------

    def _clean_up_after(self, name: str) -> None:
        """kubernetes.clean_pod_policy All: the job was submitted keeping its finished pods (so their exit codes
        and logs could be read); now that they have been, delete the job and with it its pods."""
        if self.kube.clean_pod_policy == "All":
            self._delete(name)

    def _restart_or_raise(self, name: str, job: dict[str, Any], launch: WorkerLaunch, attempt: int) -> None:
        """After failed attempt ``attempt`` (1 is the first job): delete the job (stopping every surviving rank) so
        the caller creates attempt + 1, or raise TrainingError when the failure would repeat or no re-creations
        are left (kubernetes.backoff_limit of them, counted across step retries and restarted step pods)."""
        restarts = attempt - 1
        message = self._failure_message(name, job)
        limit = self.kube.backoff_limit
        # The exit code reaches us from a PyTorchJob's pods; under a TrainJob torchrun turns 2 into 1: the file.
        reported = read_permanent_failure(self._permanent_failure_file(name))
        if reported or PERMANENT_FAILURE_EXIT_CODE in self._exit_codes(name):
            self._clean_up_after(name)
            why = f"{reported}" if reported else f"a rank exited with code {PERMANENT_FAILURE_EXIT_CODE}"
            raise TrainingError(
                f"{message}\n(not restarted: {why}, a failure a restart would repeat: fix the input or config named above)"
            )
        if restarts >= limit:
            self._clean_up_after(name)
            raise TrainingError(
                f"{message}\n(restarted {restarts} times, kubernetes.backoff_limit={limit}; attempt {attempt} of "
                f"{limit + 1} failed, giving up)"
            )
        self.emit(message)
        self.emit(
            f"{self.api.kind} {self.namespace}/{name} failed: restarting all {launch.world_size} ranks together "
            f"from the latest checkpoint (restart {restarts + 1} of {limit}: attempt {attempt + 1} of {limit + 1})"
        )
        self._delete(name)
        self._wait_gone(name)

    def _exit_codes(self, name: str) -> set[int]:
        """Exit codes of the job's trainer containers that terminated (best effort: empty when unreadable)."""
        try:
            pods = client.CoreV1Api(self.api_client).list_namespaced_pod(
                self.namespace, label_selector=self.api.pods_selector(name)
            ).items
        except Exception:  # noqa: BLE001 - without pod statuses the failure is treated as one a restart may fix
            return set()
        codes = set()
        for pod in pods:
            for status in (pod.status.container_statuses or []) if pod.status else []:
                if status.name != self.api.container:
                    continue
                for state in (status.state, status.last_state):
                    if state is not None and state.terminated is not None:
                        codes.add(int(state.terminated.exit_code))
        return codes

    def _submit_or_attach(
        self, job: dict[str, Any], staging: Staging, launch: WorkerLaunch, attempt: int
    ) -> tuple[float, int]:
        """Follow the step's job if it exists (a retried step, a restarted step pod), else create it as attempt
        ``attempt``; a job found Failed is re-created as its next attempt while re-creations are left.

        Returns the job's creation time (epoch seconds, for the deadline) and its attempt number.
        """
        name = job["metadata"]["name"]
        total = self.kube.backoff_limit + 1
        existing = self._get(name)
        if existing is not None:
            self._refuse_if_not_ours(existing, job)
            previous = attempt_of(existing)
            if job_phase(existing) != "Failed":
                self.emit(
                    f"re-attaching to existing {self.api.kind} {self.namespace}/{name} ({job_phase(existing)}), "
                    f"attempt {previous} of {total}"
                )
                return created_at(existing) or time.time(), previous
            # A retried step pod finds its job failed: the failed job's pods would otherwise answer for it.
            self.emit(
                f"{self.api.kind} {self.namespace}/{name} exists and Failed on attempt {previous} of {total} "
                f"({failure_reason(existing)})"
            )
            self._restart_or_raise(name, existing, launch, previous)
            attempt = previous + 1
        job = with_attempt(job, attempt)
        marker = self._permanent_failure_file(name)
        if marker is not None:
            marker.unlink(missing_ok=True)  # left by an earlier attempt's job: not this one's verdict
        stage_in(staging)
        created = self._create(job)
        if created is None:
            created = self._get(name) or {}
            attempt = attempt_of(created) if created else attempt
            self.emit(f"{self.api.kind} {self.namespace}/{name} was created concurrently; attaching (attempt {attempt} of {total})")
        else:
            self.emit(f"created {self.api.kind} {self.namespace}/{name} (attempt {attempt} of {total})")
        return created_at(created) or time.time(), attempt

    def _refuse_if_not_ours(self, existing: dict[str, Any], job: dict[str, Any]) -> None:
        """A job of this name that this step's launch did not create (its labels or launch annotation differ)
        is neither followed nor deleted."""
        meta, ours = existing.get("metadata") or {}, job["metadata"]
        labels = meta.get("labels") or {}
        same_labels = all(labels.get(k) == v for k, v in (ours.get("labels") or {}).items())
        launch_name = (meta.get("annotations") or {}).get(LAUNCH_ANNOTATION)
        if not same_labels or launch_name != ours["annotations"][LAUNCH_ANNOTATION]:
            raise TrainingError(
                f"{self.api.kind} {self.namespace}/{ours['name']} exists but was not created by this train step "
                f"(labels {labels}, {LAUNCH_ANNOTATION}={launch_name!r}; expected labels {ours.get('labels')} and "
                f"{ours['annotations'][LAUNCH_ANNOTATION]!r}); it was left alone. Delete it if it is stale."
            )

    def _failure_message(self, name: str, job: dict[str, Any]) -> str:
        message = f"{self.api.kind} {self.namespace}/{name} failed: {failure_reason(job)}"
        try:
            tail = failing_pod_tail(
                client.CoreV1Api(self.api_client),
                self.namespace,
                lines=self.log_tail_lines,
                selector=self.api.pods_selector(name),
                container=self.api.container,
                first_label=self.api.rank0_label,
            )
        except Exception as err:  # noqa: BLE001 - the job's own reason is still reported
            tail = ("?", f"(could not read pod logs: {err})")
        if tail:
            message += f"\nlast {self.log_tail_lines} log lines of pod {tail[0]}:\n{tail[1]}"
        return message
