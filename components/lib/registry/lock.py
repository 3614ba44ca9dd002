"""The promotion lock: one ctpipe process at a time changes a model's aliases.

MLflow has no compare-and-set on aliases, so promotions take this lock first. It is a registered model
named ``<model>--promotion-lock``: the registry refuses to create a name that exists (a unique key in
its database), which makes creation an atomic test-and-set that works the same over SQLite and over an
MLflow server. The holder's token and an expiry are tags on it; a lock whose holder crashed is broken
by the next taker after ``registry.lock_ttl_seconds``, and a holder checks it still owns the lock
right before it moves an alias (fencing).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.tracking import error_code

T = TypeVar("T")

LOCK_SUFFIX = "--promotion-lock"
OWNER_TAG = "ctpipe.lock_owner"
EXPIRES_TAG = "ctpipe.lock_expires_at"


class RegistryBusyError(RuntimeError):
    """The promotion lock stayed taken longer than we were willing to wait, or was lost while held."""


class PromotionLock:
    """The lock of registered model ``model_name``; ``call`` runs each MLflow call with retries."""

    def __init__(self, client: Any, model_name: str, config: RegistryConfig, call: Callable[[Callable[[], T], str], T]) -> None:
        self.client = client
        self.model_name = model_name
        self.name = f"{model_name}{LOCK_SUFFIX}"
        self.config = config
        self.call = call
        self._token: str | None = None  # ours while we hold the lock

    @contextmanager
    def held(self, wait_seconds: float = 120.0) -> Iterator[None]:
        """Hold the lock inside the block; RegistryBusyError after ``wait_seconds`` of someone else holding it."""
        token = uuid.uuid4().hex
        deadline = time.monotonic() + wait_seconds
        while not self.call(lambda: self._try_lock(token), f"take the promotion lock of '{self.model_name}'"):
            if time.monotonic() > deadline:
                raise RegistryBusyError(
                    f"the promotion lock '{self.name}' stayed taken for {wait_seconds:.0f}s; another ctpipe "
                    f"process is changing aliases. If none is, delete that registered model in MLflow and retry."
                )
            time.sleep(random.uniform(0.05, 0.3))
        self._token = token
        try:
            yield
        finally:
            self._token = None
            self.call(lambda: self._unlock(token), f"release the promotion lock of '{self.model_name}'")

    def assert_held(self) -> None:
        """Fencing: refuse to move an alias if our lock expired and someone else took it."""
        owner, _ = self.call(self._state, "check the promotion lock")
        if self._token is None or owner != self._token:
            raise RegistryBusyError(
                f"lost the promotion lock '{self.name}' (held longer than registry.lock_ttl_seconds="
                f"{self.config.lock_ttl_seconds:.0f}s, probably while MLflow was slow); no alias was moved. "
                "Run the step again."
            )

    def _try_lock(self, token: str) -> bool:
        from mlflow.exceptions import MlflowException

        expires = time.time() + self.config.lock_ttl_seconds
        try:
            self.client.create_registered_model(
                self.name,
                tags={OWNER_TAG: token, EXPIRES_TAG: f"{expires:.3f}"},
                description=f"Held while ctpipe changes the aliases of '{self.model_name}'; deleted when done.",
            )
            return True
        except MlflowException as err:
            if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
                # The name was taken when we inserted, and MLflow's store, reading the holder's lock to
                # report it, found it released in between: the lock is free now; take it on the next try.
                return False
            if error_code(err) != "RESOURCE_ALREADY_EXISTS":
                raise
        owner, expires_at = self._state()
        if owner == token:
            return True  # our create succeeded but its response was lost; the retry sees our own lock
        if owner is not None and expires_at < time.time():
            # Re-read right before deleting so we only break the lock we judged stale.
            if self._state()[0] == owner:
                try:
                    self.client.delete_registered_model(self.name)
                except MlflowException:
                    pass  # someone else broke or released it first
        return False

    def _state(self) -> tuple[str | None, float]:
        """(owner token, expiry epoch) of the lock, or (None, 0) when nobody holds it."""
        from mlflow.exceptions import MlflowException

        try:
            held = self.client.get_registered_model(self.name)
        except MlflowException as err:
            if error_code(err) == "RESOURCE_DOES_NOT_EXIST":
                return None, 0.0
            raise
        tags = held.tags or {}
        return tags.get(OWNER_TAG), float(tags.get(EXPIRES_TAG, "0") or 0)

    def _unlock(self, token: str) -> None:
        """Delete the lock if it is still ours; a lock already gone counts as released.

        Gone: another process broke it as stale between our read and our delete, or our own delete
        landed and only its response was lost. Any other failure propagates, so that a transient one is
        retried by the caller instead of leaving the lock to block everyone until it expires.
        """
        from mlflow.exceptions import MlflowException

        owner, _ = self._state()
        if owner != token:
            return
        try:
            self.client.delete_registered_model(self.name)
        except MlflowException as err:
            if error_code(err) != "RESOURCE_DOES_NOT_EXIST":
                raise
