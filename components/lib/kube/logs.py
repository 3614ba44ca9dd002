"""Stream a job pod's log into the component's log, and fetch the last lines of a failed pod."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from ctpipe.components.lib.kube.retry import is_transient


def _split_timestamp(line: str) -> tuple[str, str]:
    # With timestamps=true each line starts with an RFC3339Nano time and a space.
    stamp, _, text = line.partition(" ")
    return (stamp, text) if stamp[:1].isdigit() and "T" in stamp else ("", line)


class LogFollower(threading.Thread):
    """Follows the rank-0 pod's container log (the pod ``selector`` finds) in a thread, reconnecting without repeating lines.

    Each line is shown as ``[<job> <role>] text`` (``role``: master, a Spark application's driver)."""

    def __init__(
        self,
        core: client.CoreV1Api,
        namespace: str,
        job_name: str,
        *,
        emit: Callable[[str], None],
        container: str,
        selector: str,
        poll_seconds: float = 1.0,
        role: str = "master",
    ) -> None:
        super().__init__(name=f"logs-{job_name}", daemon=True)
        self.role = role
        self.core, self.namespace, self.job_name = core, namespace, job_name
        self.emit, self.container, self.poll_seconds = emit, container, poll_seconds
        self.selector = selector
        self.last_stamp = ""
        self.lines = 0
        self._reported: set[tuple[str, str]] = set()
        self._job_done = threading.Event()
        self._halt = threading.Event()

    def finish(self, timeout: float = 10.0) -> None:
        """The job has ended: drain what the pod still has to say, then stop."""
        self._job_done.set()
        self.join(timeout)
        self._halt.set()

    def stop(self) -> None:
        self._halt.set()

    def _master_pod(self) -> tuple[str, str] | None:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=self.selector).items
        ready = [p for p in pods if p.status and p.status.phase in ("Running", "Succeeded", "Failed")]
        if not ready:
            for pod in pods:
                self._report_pending(pod)
        return (ready[0].metadata.name, ready[0].status.phase) if ready else None

    def _report_pending(self, pod: Any) -> None:
        """Say once why a pod is not starting (image pull, missing secret, scheduling), from its status and events."""
        name = pod.metadata.name
        reasons = []
        for cs in (pod.status.container_statuses or []) if pod.status else []:
            waiting = cs.state.waiting if cs.state else None
            if waiting and waiting.reason not in (None, "ContainerCreating", "PodInitializing"):
                reasons.append(f"{waiting.reason}: {waiting.message or ''}".rstrip(": "))
        try:
            events = self.core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.name={name},type=Warning"
            ).items
            reasons += [f"{e.reason}: {e.message}" for e in events]
        except client.exceptions.ApiException:
            pass  # events are a diagnostic extra
        for reason in reasons:
            if (name, reason) not in self._reported:
                self._reported.add((name, reason))
                self.emit(f"[{self.job_name}] pod {name} is not running yet: {reason}")

    def _stream(self, pod: str, *, follow: bool) -> None:
        resp = self.core.read_namespaced_pod_log(
            pod, self.namespace, container=self.container, follow=follow, timestamps=True, _preload_content=False
        )
        try:
            buffer = b""
            for chunk in resp.stream(4096):
                buffer += chunk
                *complete, buffer = buffer.split(b"\n")
                for raw in complete:
                    self._emit_line(raw.decode(errors="replace"))
                if self._halt.is_set():
                    return
            if buffer:
                self._emit_line(buffer.decode(errors="replace"))
        finally:
            resp.release_conn()

    def _emit_line(self, line: str) -> None:
        stamp, text = _split_timestamp(line)
        if stamp and stamp <= self.last_stamp:
            return  # already shown before a reconnect
        self.last_stamp = stamp or self.last_stamp
        self.lines += 1
        self.emit(f"[{self.job_name} {self.role}] {text}")

    def run(self) -> None:
        while not self._halt.is_set():
            # Once the job has ended, make one last pass so lines after a dropped stream still show.
            final = self._job_done.is_set()
            try:
                pod = self._master_pod()
                if pod:
                    # A terminated pod says no more: read its whole log once (a restarted container
                    # keeps the pod Running, so that case is still followed).
                    terminated = pod[1] in ("Succeeded", "Failed")
                    self._stream(pod[0], follow=not terminated)
                    if terminated:
                        return
            except Exception as err:  # noqa: BLE001 - logs are best effort; the job's status decides
                if not is_transient(err) and not isinstance(err, client.exceptions.ApiException):
                    self.emit(f"[{self.job_name}] log streaming stopped: {err}")
                    return
            if final:
                return
            self._job_done.wait(self.poll_seconds)


def _terminated_nonzero(status: Any) -> bool:
    for cs in (status.container_statuses or []) if status else []:
        for state in (cs.state, cs.last_state):
            term = state.terminated if state else None
            if term and term.exit_code:
                return True
    return False


def failing_pod_tail(
    core: client.CoreV1Api,
    namespace: str,
    *,
    lines: int = 30,
    selector: str,
    container: str,
    first_label: tuple[str, str],
) -> tuple[str, str] | None:
    """(pod name, its last ``lines`` log lines) of the job's failed pod, rank 0 first; None if none."""
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    failed = [p for p in pods if (p.status and p.status.phase == "Failed") or _terminated_nonzero(p.status)]
    failed.sort(key=lambda p: (p.metadata.labels or {}).get(first_label[0]) != first_label[1])
    for pod in failed:
        try:
            text = core.read_namespaced_pod_log(
                pod.metadata.name, namespace, container=container, tail_lines=lines, _preload_content=False
            ).data.decode(errors="replace")
        except client.exceptions.ApiException as err:
            text = f"(log unavailable: {err.status} {err.reason})"
        return pod.metadata.name, text.rstrip("\n")
    return None
