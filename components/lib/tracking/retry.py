"""Bounded retries with exponential backoff for MLflow calls that may meet a server that is down.

MLflow's own HTTP client retries connection errors up to 7 times with a backoff that can add up to
minutes; inside ``bounded_mlflow_http()`` it fails fast instead, so our loop owns the retry budget and
the final error says how long we tried.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ctpipe.components.lib.credentials import redact_text

if TYPE_CHECKING:
    from ctpipe.components.lib.config import RegistryConfig

T = TypeVar("T")
log = logging.getLogger(__name__)

# Error codes / message fragments of failures that a later attempt may not meet.
_TRANSIENT_CODES = {"TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "DEADLINE_EXCEEDED", "ABORTED"}
_TRANSIENT_TEXT = (
    "failed with exception",  # MLflow's wrapper around requests' connection errors
    "max retries exceeded",
    "connection refused",
    "connection aborted",
    "connection reset",
    "remote end closed",
    "timed out",
    "database is locked",
    "temporarily unavailable",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
)


class RegistryUnavailableError(RuntimeError):
    """MLflow stayed unreachable through every retry; the message says what was (not) done."""


# How long a transient MLflow failure is retried by default: a tracking server's restart (a pod rescheduled,
# a rollout) takes from ~10 s to a minute or two; a step that gives up sooner throws its work away.
DEFAULT_BUDGET_SECONDS = 180.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently an MLflow call is retried (``registry.retries``, ``registry.retry_budget_seconds``
    and the backoffs): until it succeeds, ``retries`` retries are spent, or the next wait would end past
    ``budget_seconds`` from the first attempt, whichever comes first."""

    retries: int = 50
    backoff_seconds: float = 1.0
    max_backoff_seconds: float = 15.0
    budget_seconds: float = DEFAULT_BUDGET_SECONDS

    @classmethod
    def of(cls, registry: RegistryConfig) -> RetryPolicy:
        """The policy the config's ``registry`` section sets."""
        return cls(registry.retries, registry.retry_backoff_seconds, registry.retry_max_backoff_seconds,
                   registry.retry_budget_seconds)

    def call(
        self,
        fn: Callable[[], T],
        what: str,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> T:
        """``fn()``, retried on transient failures; ``what`` completes "MLflow was unavailable while trying to …"."""
        return call_with_retries(fn, what=what, retries=self.retries, backoff_seconds=self.backoff_seconds,
                                 max_backoff_seconds=self.max_backoff_seconds, budget_seconds=self.budget_seconds,
                                 sleep=sleep, clock=clock)


def is_transient(err: BaseException) -> bool:
    """True for failures worth retrying (server down, database locked), False for real errors."""
    if isinstance(err, ConnectionError | TimeoutError):
        return True
    try:
        import requests

        if isinstance(err, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
            return True
    except ImportError:  # pragma: no cover - requests comes with mlflow
        pass
    if error_code(err) in _TRANSIENT_CODES:
        return True
    text = str(err).lower()
    return any(fragment in text for fragment in _TRANSIENT_TEXT)


def error_code(err: BaseException) -> str:
    """MLflow's error code of ``err`` (``RESOURCE_DOES_NOT_EXIST`` …), or "" for any other exception."""
    return str(getattr(err, "error_code", "") or "")


def call_with_retries(
    fn: Callable[[], T],
    *,
    what: str,
    retries: int,
    backoff_seconds: float,
    max_backoff_seconds: float = 15.0,
    budget_seconds: float = DEFAULT_BUDGET_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``fn``; on a transient failure wait backoff, 2×backoff, … (capped) and retry, at most ``retries``
    times and while the next wait ends within ``budget_seconds`` of the first attempt."""
    started = clock()
    for attempt in range(retries + 1):
        try:
            # MLflow's own HTTP retries off: a server that does not answer is reported after this attempt, with
            # the time left, instead of after minutes of MLflow's silent backoff.
            with bounded_mlflow_http():
                return fn()
        except Exception as err:
            if not is_transient(err):
                raise
            delay = min(backoff_seconds * (2**attempt), max_backoff_seconds)
            elapsed = clock() - started
            if attempt == retries or elapsed + delay > budget_seconds:
                raise RegistryUnavailableError(
                    f"MLflow was unavailable while trying to {what}: {attempt + 1} attempts over "
                    f"{elapsed:.1f}s failed (retry budget {budget_seconds:g}s: registry.retry_budget_seconds); "
                    f"last error: {str(err)[:300]}"
                ) from err
            log.warning(
                "MLflow unavailable (%s: %s) while trying to %s; waiting %.1fs before retry %d (%.0fs of the %gs "
                "retry budget left: registry.retry_budget_seconds)",
                type(err).__name__,
                redact_text(str(err).splitlines()[0] if str(err) else "")[:160],
                what,
                delay,
                attempt + 1,
                budget_seconds - elapsed,
                budget_seconds,
            )
            sleep(delay)
    raise AssertionError("unreachable")


@contextmanager
def bounded_mlflow_http(timeout_seconds: int = 30) -> Iterator[None]:
    """Make MLflow's HTTP client fail fast (no internal retries, a request timeout) inside the block."""
    values = {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_seconds),
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",  # keeps step logs readable
    }
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def unreachable(tracking_uri: str, timeout_seconds: float = 3.0) -> str | None:
    """Why an HTTP tracking server does not answer at all (one request, no retries), else None; a file or SQLite
    store is never "unreachable". For a command to say so at once, before its steps spend their retry budget."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    import requests

    try:
        requests.get(f"{tracking_uri.rstrip('/')}/health", timeout=timeout_seconds)
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as err:
        return redact_text(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")[:300]
    return None  # it answered (any status: a server behind auth answers 401, and is there)
