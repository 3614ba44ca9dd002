"""Run the validation as a SparkApplication and follow it to the end, as the train step follows its TrainJob.

The application (``components/lib/kube/sparkapplication.py``) is named from the launch (a retried step, or a
restarted step pod, finds it again and re-attaches when its labels and launch annotation are this step's),
validated strictly against the Spark Operator's CRD before it is created, and followed with a watch; the
driver's log is streamed into the step's log. A failed application is deleted and created again whole, up to
``kubernetes.spark_backoff_limit`` times counted on its ``ctpipe.io/attempt`` annotation (so across step
retries), unless its driver exited 2: bad data or config, which a re-run would only repeat. Past
``kubernetes.spark_deadline_seconds``, or when the run is cancelled (SIGTERM), the application is deleted.
A cluster without the operator's CRD stops the step at once, naming the CRD.

The step's paths (its output artifacts) are mapped onto the shared volume the Spark pods mount; each new
application starts from empty output folders there, and what the driver wrote is copied back when it ends.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kubernetes import client

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.kube import sparkapplication as sa
from ctpipe.components.lib.kube.api import default_api_client
from ctpipe.components.lib.kube.discovery import require_spark_operator
from ctpipe.components.lib.kube.job_status import created_at
from ctpipe.components.lib.kube.logs import LogFollower, failing_pod_tail
from ctpipe.components.lib.kube.namespace import resolve_namespace
from ctpipe.components.lib.kube.objects import Cancelled, CustomObjects, DeadlineExceeded, cancel_on_sigterm
from ctpipe.components.lib.kube.pod import LAUNCH_ANNOTATION, JobValidationError
from ctpipe.components.lib.kube.staging import Staging, plan_staging, stage_in, stage_out, step_local_paths

# The application's attempt number (1, 2, ...), so a restarted step pod knows how many re-creations are left.
ATTEMPT_ANNOTATION = "ctpipe.io/attempt"
# The driver's exit code for bad data or config (the driver module's contract): never re-created.
USER_ERROR_EXIT_CODE = 2
_EXIT_CODE = re.compile(r"ExitCode: (-?\d+)")


class SparkApplicationError(RuntimeError):
    """The application could not run to its end (infrastructure: retried by the watcher, not a user error)."""


@dataclass(frozen=True)
class SparkOutcome:
    """How the application ended when its driver ran to the end: it succeeded, or it exited 2 (bad data or config)."""

    name: str
    succeeded: bool
    exit_code: int | None
    message: str  # the operator's state and message, with the driver's last log lines on a failure


def attempt_of(app: dict[str, Any]) -> int:
    value = ((app.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION, "1")
    return int(value) if str(value).isdigit() and int(value) >= 1 else 1


def _with_attempt(app: dict[str, Any], attempt: int) -> dict[str, Any]:
    meta = app["metadata"]
    return {**app, "metadata": {**meta, "annotations": {**meta["annotations"], ATTEMPT_ANNOTATION: str(attempt)}}}


def _terminal(app: dict[str, Any]) -> bool:
    return sa.app_state(app) in (sa.COMPLETED, sa.FAILED)


class SparkApplicationLauncher:
    """One SparkApplication per launch in the step's namespace, created or re-attached, followed to the end."""

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
        operator_wait_seconds: float = 120.0,
    ) -> None:
        self.kube = config.kubernetes
        self._namespace = namespace
        self._api_client = api_client
        self.emit = emit or (lambda line: print(line, flush=True))
        self.poll_seconds, self.watch_seconds, self.grace_seconds = poll_seconds, watch_seconds, grace_seconds
        self.retry_attempts, self.backoff_seconds = retry_attempts, backoff_seconds
        self.log_tail_lines = log_tail_lines
        self.operator_wait_seconds = operator_wait_seconds
        self._last_seen = ""
        self._warned_operator = False
        self._waited_since = time.monotonic()

    @property
    def namespace(self) -> str:
        """The step pod's own namespace (a configured kubernetes.namespace must equal it)."""
        if self._namespace is None:
            self._namespace = resolve_namespace(self.kube.namespace)
        return self._namespace

    @property
    def api_client(self) -> client.ApiClient:
        if self._api_client is None:
            self._api_client = default_api_client()
        return self._api_client

    def _apps(self) -> CustomObjects:
        return CustomObjects(self.api_client, group=sa.GROUP, version=sa.VERSION, plural=sa.PLURAL, kind=sa.KIND,
                             namespace=self.namespace, emit=self.emit, retry_attempts=self.retry_attempts,
                             backoff_seconds=self.backoff_seconds, poll_seconds=self.poll_seconds,
                             watch_seconds=self.watch_seconds)

    # --- building ------------------------------------------------------------------------------

    def plan(self, launch: sa.SparkLaunch) -> tuple[dict[str, Any], Staging]:
        """The validated application for ``launch`` and the staging of its paths onto the shared volume."""
        name = sa.application_name(launch.job_name)
        if not self.kube.shared_pvc:
            local = step_local_paths(launch.command)
            raise JobValidationError(
                "kubernetes.shared_pvc is unset, so the Spark pods mount no volume for the validate step's outputs "
                f"{', '.join(repr(p) for p in local)}. Set kubernetes.shared_pvc to a ReadWriteMany PVC of the "
                "namespace (manifests/: ctpipe-shared), or set validation.engine=local."
            )
        staging = plan_staging(launch.command, self.kube.shared_mount_path, name)
        app = sa.build_sparkapplication(replace(self.kube, namespace=self.namespace),
                                        replace(launch, command=staging.command))
        sa.validate_sparkapplication(app)
        return app, staging

    # --- running -------------------------------------------------------------------------------

    def run(self, launch: sa.SparkLaunch) -> SparkOutcome:
        """Create (or re-attach to) the application and follow it; re-create it after an infrastructure failure up
        to kubernetes.spark_backoff_limit times. Returns how it ended when the driver ran to its end (succeeded,
        or exited 2); raises SparkApplicationError otherwise, and SparkOperatorMissing without the operator."""
        require_spark_operator(self.api_client)
        app, staging = self.plan(launch)
        apps = self._apps()
        name = app["metadata"]["name"]
        first_created: float | None = None  # one deadline for the step, across re-creations
        attempt = 1  # of the application this step creates next; counted on the application, across step retries
        with cancel_on_sigterm():
            while True:
                follower: LogFollower | None = None
                drain = 10.0  # how long the driver's log may finish after the application ended
                try:
                    created, attempt = self._submit_or_attach(apps, app, staging, attempt)
                    first_created = first_created or created
                    deadline_at = (time.monotonic() + launch.deadline_seconds + self.grace_seconds
                                   - (time.time() - first_created))
                    follower = LogFollower(client.CoreV1Api(self.api_client), self.namespace, name, emit=self.emit,
                                           container=sa.DRIVER_CONTAINER, selector=sa.driver_selector(name),
                                           poll_seconds=min(self.poll_seconds, 2.0), role="driver")
                    follower.start()
                    self._waited_since = time.monotonic()
                    final = apps.follow(name, deadline_at, terminal=_terminal, report=self._report)
                    follower.finish(timeout=drain)
                    follower = None
                    outcome = self._outcome(name, final)
                    if outcome.succeeded or outcome.exit_code == USER_ERROR_EXIT_CODE:
                        stage_out(staging)  # the reports, also of failed validation, go back to the step
                        self._clean_up_after(apps, name)
                        return outcome
                    self._recreate_or_raise(apps, name, outcome, attempt)
                    attempt += 1
                except Cancelled:
                    drain = 1.0  # KFP's grace period is short: delete first
                    self.emit(f"step cancelled (SIGTERM): deleting {apps.where(name)}")
                    apps.delete(name)
                    raise SparkApplicationError(f"{apps.where(name)} was cancelled and deleted") from None
                except DeadlineExceeded:
                    drain = 1.0
                    apps.delete(name)
                    raise SparkApplicationError(
                        f"{apps.where(name)} did not finish within kubernetes.spark_deadline_seconds="
                        f"{launch.deadline_seconds} (+{self.grace_seconds:.0f}s grace); it was deleted. Raise the "
                        "deadline or give the application more executors (kubernetes.spark_executor_instances)."
                    ) from None
                finally:
                    if follower is not None:
                        follower.finish(timeout=drain)

    def _submit_or_attach(self, apps: CustomObjects, app: dict[str, Any], staging: Staging,
                          attempt: int) -> tuple[float, int]:
        """Follow the step's application if it exists, else create it as ``attempt``; returns its creation time and
        attempt. One that ended in an infrastructure failure is re-created as its next attempt while any are left."""
        name = app["metadata"]["name"]
        total = self.kube.spark_backoff_limit + 1
        existing = apps.get(name)
        if existing is not None:
            self._refuse_if_not_ours(apps, existing, app)
            attempt = attempt_of(existing)
            outcome = self._outcome(name, existing) if _terminal(existing) else None
            if outcome is None or outcome.succeeded or outcome.exit_code == USER_ERROR_EXIT_CODE:
                self.emit(f"re-attaching to existing {apps.where(name)} ({sa.app_state(existing)}), "
                          f"attempt {attempt} of {total}")
                return created_at(existing) or time.time(), attempt
            self.emit(f"{apps.where(name)} exists and FAILED on attempt {attempt} of {total} ({outcome.message})")
            self._recreate_or_raise(apps, name, outcome, attempt)
            attempt += 1
        _start_clean(staging)
        created = apps.create(_with_attempt(app, attempt))
        if created is None:
            created = apps.get(name) or {}
            attempt = attempt_of(created) if created else attempt
            self.emit(f"{apps.where(name)} was created concurrently; attaching (attempt {attempt} of {total})")
        else:
            self.emit(f"created {apps.where(name)} (attempt {attempt} of {total}; image {self.kube.spark_image}, "
                      f"{self.kube.spark_executor_instances} executors)")
        return created_at(created) or time.time(), attempt

    def _refuse_if_not_ours(self, apps: CustomObjects, existing: dict[str, Any], app: dict[str, Any]) -> None:
        """An application of this name that this step's launch did not create is neither followed nor deleted."""
        meta, ours = existing.get("metadata") or {}, app["metadata"]
        labels = meta.get("labels") or {}
        launch_name = (meta.get("annotations") or {}).get(LAUNCH_ANNOTATION)
        if any(labels.get(k) != v for k, v in ours["labels"].items()) or launch_name != ours["annotations"][LAUNCH_ANNOTATION]:
            raise SparkApplicationError(
                f"{apps.where(ours['name'])} exists but was not created by this validate step (labels {labels}, "
                f"{LAUNCH_ANNOTATION}={launch_name!r}; expected labels {ours['labels']} and "
                f"{ours['annotations'][LAUNCH_ANNOTATION]!r}); it was left alone. Delete it if it is stale."
            )

    def _recreate_or_raise(self, apps: CustomObjects, name: str, outcome: SparkOutcome, attempt: int) -> None:
        """After failed attempt ``attempt``: delete the application so the caller creates the next one, or raise
        when no re-creations are left (kubernetes.spark_backoff_limit, counted across step retries)."""
        limit = self.kube.spark_backoff_limit
        if attempt - 1 >= limit:
            self._clean_up_after(apps, name)
            raise SparkApplicationError(
                f"{outcome.message}\n(created again {attempt - 1} times, kubernetes.spark_backoff_limit={limit}; "
                f"attempt {attempt} of {limit + 1} failed, giving up)"
            )
        self.emit(outcome.message)
        self.emit(f"{apps.where(name)} failed: creating it again (attempt {attempt + 1} of {limit + 1})")
        apps.delete(name)
        apps.wait_gone(name)
        self._wait_driver_gone(name)

    def _wait_driver_gone(self, name: str, timeout: float = 120.0) -> None:
        """The operator deletes the old driver pod when its application goes; while that pod still terminates, the
        next application's spark-submit would fail on its name (the same ``<name>-driver``)."""
        core, pod = client.CoreV1Api(self.api_client), f"{name}-driver"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                core.read_namespaced_pod(pod, self.namespace)
            except client.exceptions.ApiException as err:
                if err.status == 404:
                    return
            time.sleep(min(self.poll_seconds, 2.0))
        self.emit(f"driver pod {self.namespace}/{pod} is still there after {timeout:.0f}s; creating the application anyway")

    def _clean_up_after(self, apps: CustomObjects, name: str) -> None:
        """kubernetes.clean_pod_policy All: delete the finished application now (else its TTL does)."""
        if self.kube.clean_pod_policy == "All":
            apps.delete(name)

    def _report(self, app: dict[str, Any]) -> None:
        state = sa.app_state(app)
        executors = (app.get("status") or {}).get("executorState") or {}
        counts = {}
        for value in executors.values():
            counts[value] = counts.get(value, 0) + 1
        seen = state + (f" (executors: {', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})" if counts else "")
        if seen != self._last_seen:
            self.emit(f"{sa.KIND} {self.namespace}/{app['metadata']['name']}: {seen}")
            self._last_seen = seen
        waited = time.monotonic() - self._waited_since
        if state == "NEW" and not self._warned_operator and waited > self.operator_wait_seconds:
            self._warned_operator = True
            self.emit(f"{sa.KIND} {app['metadata']['name']} has no state after {self.operator_wait_seconds:.0f}s: is "
                      f"the Spark Operator's controller running, and does it watch namespace {self.namespace} "
                      "(its Helm value spark.jobNamespaces)?")

    # --- how it ended --------------------------------------------------------------------------

    def _outcome(self, name: str, app: dict[str, Any]) -> SparkOutcome:
        if sa.app_state(app) == sa.COMPLETED:
            return SparkOutcome(name, True, 0, f"{sa.KIND} {self.namespace}/{name} completed")
        code = self._driver_exit_code(app)
        message = f"{sa.KIND} {self.namespace}/{name} failed: {sa.failure_reason(app)}"
        try:
            tail = failing_pod_tail(client.CoreV1Api(self.api_client), self.namespace, lines=self.log_tail_lines,
                                    selector=sa.driver_selector(name), container=sa.DRIVER_CONTAINER,
                                    first_label=(sa.LABEL_SPARK_ROLE, "driver"))
        except Exception as err:  # noqa: BLE001 - the operator's own message is still reported
            tail = ("?", f"(could not read the driver's log: {err})")
        if tail:
            message += f"\nlast {self.log_tail_lines} log lines of the driver pod {tail[0]}:\n{tail[1]}"
        return SparkOutcome(name, False, code, message)

    def _driver_exit_code(self, app: dict[str, Any]) -> int | None:
        """The driver container's exit code: from its pod, else from the operator's message
        ("driver container failed with ExitCode: N, Reason: ...", v2.5.2 controller.go); None when unknown."""
        pod = ((app.get("status") or {}).get("driverInfo") or {}).get("podName") or f"{app['metadata']['name']}-driver"
        try:
            status = client.CoreV1Api(self.api_client).read_namespaced_pod(pod, self.namespace).status
            for container in (status.container_statuses or []) if status else []:
                if container.name == sa.DRIVER_CONTAINER and container.state and container.state.terminated:
                    return int(container.state.terminated.exit_code)
        except Exception:  # noqa: BLE001 - the pod may be gone (TTL, a deleted app): the message may still say
            pass
        found = _EXIT_CODE.search(((app.get("status") or {}).get("applicationState") or {}).get("errorMessage") or "")
        return int(found.group(1)) if found else None


def _start_clean(staging: Staging) -> None:
    """Empty the outputs on the shared volume before an application starts: an earlier attempt's half-written
    snapshot must not mix with this one's when they are copied back."""
    for target in staging.mapping.values():
        path = Path(target)
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    stage_in(staging)
