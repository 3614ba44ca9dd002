"""One kind of namespaced custom object (a SparkApplication, a job) reached with retries, and followed to its end.

``CustomObjects`` gets, creates (with the API server's strict field validation), deletes and watches the objects
of one group/version/plural in one namespace; transient API errors (429, 5xx, dropped connections) are retried
with backoff, and ``follow`` watches one object until a caller's test says it is terminal, polling when watches
keep failing and giving up at a deadline. What to do with the object is its launcher's (the validate step's
``spark_launcher.py``). ``cancel_on_sigterm`` turns KFP's cancel (SIGTERM to the step's pod) into an exception,
so a launcher can delete what it created.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ctpipe.components.lib.kube.retry import is_transient, retry_call


class DeadlineExceeded(Exception):
    """The wait ran past its deadline."""


class ObjectGone(RuntimeError):
    """The followed object was deleted by someone else while it was followed."""


class Cancelled(BaseException):
    """SIGTERM arrived (KFP cancels a step by terminating its pod); BaseException, so no client swallows it."""


@contextlib.contextmanager
def cancel_on_sigterm() -> Iterator[None]:
    """While in this block, SIGTERM raises ``Cancelled`` in the main thread (once: a second SIGTERM cannot interrupt
    the clean-up the first one started). Elsewhere than the main thread, where Python delivers signals, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Cancelled()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class CustomObjects:
    """The objects ``group/version/plural`` (kind ``kind``) in ``namespace``, reached with retries."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        group: str,
        version: str,
        plural: str,
        kind: str,
        namespace: str,
        emit: Callable[[str], None],
        retry_attempts: int = 6,
        backoff_seconds: float = 1.0,
        poll_seconds: float = 5.0,
        watch_seconds: int = 60,
    ) -> None:
        self.api_client = api_client
        self.group, self.version, self.plural, self.kind = group, version, plural, kind
        self.namespace = namespace
        self.emit = emit
        self.retry_attempts, self.backoff_seconds = retry_attempts, backoff_seconds
        self.poll_seconds, self.watch_seconds = poll_seconds, watch_seconds

    def where(self, name: str) -> str:
        return f"{self.kind} {self.namespace}/{name}"

    def _api(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def _path(self) -> tuple[str, str, str, str]:
        return self.group, self.version, self.namespace, self.plural

    def _retry(self, call: Callable[[], Any]) -> Any:
        return retry_call(call, attempts=self.retry_attempts, backoff_seconds=self.backoff_seconds, on_retry=self.emit)

    def get(self, name: str) -> dict[str, Any] | None:
        """The object, or None when there is none of that name."""
        try:
            return self._retry(lambda: self._api().get_namespaced_custom_object(*self._path(), name))
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        """The created object, or None when one of that name exists already (created concurrently)."""
        try:
            return self._retry(
                lambda: self._api().create_namespaced_custom_object(*self._path(), obj, field_validation="Strict")
            )
        except ApiException as err:
            if err.status == 409:
                return None
            raise

    def delete(self, name: str) -> None:
        """Delete the object and, in the background, what it owns (its pods); one already gone is no error."""
        try:
            retry_call(
                lambda: self._api().delete_namespaced_custom_object(*self._path(), name, propagation_policy="Background"),
                attempts=3, backoff_seconds=min(self.backoff_seconds, 1.0), on_retry=self.emit,
            )
            self.emit(f"deleted {self.where(name)}")
        except ApiException as err:
            if err.status != 404:
                self.emit(f"could not delete {self.where(name)}: {err.status} {err.reason}")

    def wait_gone(self, name: str, timeout: float = 120.0) -> None:
        end = time.monotonic() + timeout
        while self.get(name) is not None:
            if time.monotonic() > end:
                raise RuntimeError(f"{self.where(name)} was not deleted within {timeout:.0f}s")
            time.sleep(min(self.poll_seconds, 2.0))

    def follow(self, name: str, deadline_at: float, *, terminal: Callable[[dict[str, Any]], bool],
               report: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Watch the object until ``terminal(obj)``; ``report(obj)`` sees every version on the way, and the latest
        again whenever a watch ends quietly (so a report can notice that nothing happens). Falls back to polling
        after three failed watches; raises DeadlineExceeded at ``deadline_at`` (time.monotonic) and ObjectGone
        when the object is deleted meanwhile."""
        resource_version: str | None = None
        latest: dict[str, Any] | None = None
        failures = 0
        while True:
            remaining = deadline_at - time.monotonic()
            if remaining <= 0:
                raise DeadlineExceeded()
            if failures >= 3:
                obj = self.get(name)
                if obj is None:
                    raise ObjectGone(f"{self.where(name)} disappeared (deleted by someone else?)")
                report(obj)
                if terminal(obj):
                    return obj
                time.sleep(min(self.poll_seconds, max(remaining, 0.01)))
                continue
            try:
                for event in watch.Watch().stream(
                    self._api().list_namespaced_custom_object, *self._path(),
                    field_selector=f"metadata.name={name}", resource_version=resource_version,
                    timeout_seconds=max(1, int(min(remaining, self.watch_seconds))),
                    _request_timeout=(10, min(remaining, self.watch_seconds) + 10),
                ):
                    obj = event["object"]
                    if event["type"] == "BOOKMARK":
                        continue
                    if event["type"] == "DELETED":
                        raise ObjectGone(f"{self.where(name)} was deleted while the step waited")
                    resource_version = (obj.get("metadata") or {}).get("resourceVersion") or resource_version
                    failures = 0
                    latest = obj
                    report(obj)
                    if terminal(obj):
                        return obj
                    if time.monotonic() >= deadline_at:
                        raise DeadlineExceeded()
                if latest is not None:
                    report(latest)
            except ApiException as err:
                if err.status == 410:  # resourceVersion too old: list again from now
                    resource_version = None
                    continue
                if not is_transient(err) and err.status not in (404, 405):
                    raise
                failures += 1
                self.emit(f"watch on {self.where(name)} failed ({err.status}); {'retrying' if failures < 3 else 'polling'}")
                time.sleep(min(self.backoff_seconds * 2**failures, 30.0))
            except (ObjectGone, DeadlineExceeded):
                raise
            except Exception as err:
                if not is_transient(err):
                    raise
                failures += 1
                self.emit(f"watch on {self.where(name)} dropped ({type(err).__name__}); reconnecting")
                time.sleep(min(self.backoff_seconds * 2**failures, 30.0))
