"""Retrying Kubernetes API calls on transient failures (HTTP 429/5xx, dropped connections)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import TypeVar

import urllib3
from kubernetes.client.exceptions import ApiException

T = TypeVar("T")


def is_transient(err: BaseException) -> bool:
    """True for errors worth retrying: throttling, server errors, broken or refused connections."""
    if isinstance(err, ApiException):
        return err.status in (0, 408, 429) or (err.status or 0) >= 500
    return isinstance(err, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def _retry_after(err: BaseException) -> float | None:
    headers = getattr(err, "headers", None) or {}
    try:
        return float(headers.get("Retry-After")) if headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None


def retry_call(
    call: Callable[[], T],
    *,
    attempts: int = 6,
    backoff_seconds: float = 1.0,
    max_backoff_seconds: float = 30.0,
    on_retry: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, retried with exponential backoff and jitter on transient errors; others raise at once."""
    for attempt in range(attempts):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - filtered by is_transient, re-raised otherwise
            if not is_transient(err) or attempt == attempts - 1:
                raise
            delay = _retry_after(err) or min(max_backoff_seconds, backoff_seconds * 2**attempt)
            delay *= 1 + 0.1 * random.random()
            if on_retry:
                status = getattr(err, "status", None) or type(err).__name__
                on_retry(f"transient Kubernetes API error ({status}); retry {attempt + 1}/{attempts - 1} in {delay:.1f}s")
            sleep(delay)
    raise AssertionError("unreachable")
