"""Bounded retries and the promotion lock (held, stale), without a server."""

from __future__ import annotations

import threading
import time

import mlflow
import pytest
from mlflow.exceptions import MlflowException

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.registry.lock import RegistryBusyError
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError, call_with_retries, is_transient


def test_transient_failures_are_retried_with_capped_exponential_backoff():
    calls, sleeps = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 4:
            raise MlflowException("API request to http://x failed with exception Connection refused")
        return "ok"

    assert (
        call_with_retries(
            flaky, what="x", retries=5, backoff_seconds=1, max_backoff_seconds=3, sleep=sleeps.append
        )
        == "ok"
    )
    assert sleeps == [1, 2, 3]


def test_retries_are_bounded_and_the_error_says_what_was_tried():
    sleeps = []
    with pytest.raises(RegistryUnavailableError, match="trying to move the alias: 3 attempts"):
        call_with_retries(
            lambda: (_ for _ in ()).throw(ConnectionError("refused")),
            what="move the alias",
            retries=2,
            backoff_seconds=0.5,
            sleep=sleeps.append,
        )
    assert sleeps == [0.5, 1.0]


def test_real_errors_are_not_retried():
    calls = []

    def broken():
        calls.append(1)
        raise MlflowException("Registered Model with name=x not found", error_code="RESOURCE_DOES_NOT_EXIST")

    with pytest.raises(MlflowException):
        call_with_retries(broken, what="x", retries=5, backoff_seconds=0, sleep=lambda s: None)
    assert len(calls) == 1
    assert is_transient(MlflowException("(sqlite3.OperationalError) database is locked"))


@pytest.fixture()
def registry(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    reg = Registry(uri, RegistryConfig(model_name="m", lock_ttl_seconds=1.0, retry_backoff_seconds=0.01))
    reg.ensure_registered_model()
    return reg


def test_the_lock_excludes_a_second_holder_until_released(registry):
    order = []

    def second_holder() -> None:
        with registry.locked(wait_seconds=30):
            order.append("second")

    with registry.locked():
        waiter = threading.Thread(target=second_holder)
        waiter.start()
        time.sleep(0.5)
        order.append("first done")
    waiter.join(timeout=30)
    assert order == ["first done", "second"]
    assert registry.lock_name not in {m.name for m in registry.client.search_registered_models()}


def test_a_held_lock_times_out_clearly_and_a_stale_one_is_broken(registry):
    registry.config.lock_ttl_seconds = 60
    with registry.locked():
        with pytest.raises(RegistryBusyError, match="stayed taken"):
            with registry.locked(wait_seconds=0.3):
                pass
    # A holder that died leaves its lock behind; after the TTL the next process breaks it.
    client = mlflow.MlflowClient(registry.uri, registry_uri=registry.uri)
    client.create_registered_model(
        registry.lock_name, tags={"ctpipe.lock_owner": "dead", "ctpipe.lock_expires_at": str(time.time() - 1)}
    )
    started = time.monotonic()
    with registry.locked(wait_seconds=10):
        pass
    assert time.monotonic() - started < 5


def test_an_alias_is_never_moved_by_a_holder_that_lost_its_lock(registry, tmp_path):
    client = mlflow.MlflowClient(registry.uri, registry_uri=registry.uri)
    with registry.locked():
        # Our lock expired and another process took it over.
        client.delete_registered_model(registry.lock_name)
        client.create_registered_model(
            registry.lock_name,
            tags={"ctpipe.lock_owner": "other", "ctpipe.lock_expires_at": str(time.time() + 60)},
        )
        with pytest.raises(RegistryBusyError, match="lost the promotion lock"):
            registry._move_champion("1", kind="manual", by="me", reason="x", previous=None, pop=False)
    assert registry.alias_version("champion") is None
    assert registry.lock_name in {m.name for m in client.search_registered_models()}  # not ours to delete


def test_an_alias_is_not_moved_when_the_lock_is_lost_while_the_version_is_tagged(registry, monkeypatch):
    # The version's promotion tags are four retried calls; against a slow MLflow they can outlast
    # registry.lock_ttl_seconds, and another process breaks the lock and promotes its own candidate. Before:
    # ownership was checked only before those calls, so this holder then moved the alias over the other's.
    client = mlflow.MlflowClient(registry.uri, registry_uri=registry.uri)
    client.create_model_version("m", "file:///elsewhere")
    real = mlflow.MlflowClient.set_model_version_tag

    def slow_then_taken_over(self, *args, **kwargs):
        if registry.lock_name in {m.name for m in client.search_registered_models()} and \
                client.get_registered_model(registry.lock_name).tags.get("ctpipe.lock_owner") != "other":
            client.delete_registered_model(registry.lock_name)
            client.create_registered_model(
                registry.lock_name,
                tags={"ctpipe.lock_owner": "other", "ctpipe.lock_expires_at": str(time.time() + 60)},
            )
        return real(self, *args, **kwargs)

    monkeypatch.setattr(mlflow.MlflowClient, "set_model_version_tag", slow_then_taken_over)
    with registry.locked():
        with pytest.raises(RegistryBusyError, match="lost the promotion lock"):
            registry._move_champion("1", kind="manual", by="me", reason="x", previous=None, pop=False)
    assert registry.alias_version("champion") is None and registry.champion_history() == []


def test_releasing_a_lock_that_is_already_gone_is_not_an_error(registry):
    # Between our read of the lock (our token) and our delete, it disappears: another process broke it as
    # stale, or our own earlier delete landed and only its response was lost. Either way it is released.
    other = mlflow.MlflowClient(registry.uri, registry_uri=registry.uri)
    read_lock = registry.client.get_registered_model

    def read_then_lose(name):
        held = read_lock(name)
        if name == registry.lock_name:
            other.delete_registered_model(name)
        return held

    with registry.locked():
        registry.client.get_registered_model = read_then_lose
    registry.client.get_registered_model = read_lock
    assert registry.lock_name not in {m.name for m in registry.client.search_registered_models()}


def test_a_transient_failure_while_releasing_the_lock_is_retried_not_ignored(registry):
    read_lock = registry.client.get_registered_model
    failures = []

    def locked_once(name):
        if name == registry.lock_name and not failures:
            failures.append(name)
            raise MlflowException("(sqlite3.OperationalError) database is locked")
        return read_lock(name)

    registry.config.lock_ttl_seconds = 60  # a lock left behind would block others for a minute
    with registry.locked():
        registry.client.get_registered_model = locked_once
    assert failures
    assert registry.lock_name not in {m.name for m in registry.client.search_registered_models()}


def test_a_lock_released_while_we_try_to_take_it_is_taken_on_the_next_try(registry, monkeypatch):
    # The flaky "Registered Model ...--promotion-lock not found": our create of the lock fails on the
    # unique name, MLflow's store then reads the existing lock to say so, and the holder released it in
    # between, so the create raises RESOURCE_DOES_NOT_EXIST. That is a lock just freed, not an error.
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore

    holder = mlflow.MlflowClient(registry.uri, registry_uri=registry.uri)
    holder.create_registered_model(
        registry.lock_name, tags={"ctpipe.lock_owner": "other", "ctpipe.lock_expires_at": str(time.time() + 60)}
    )
    read_existing = SqlAlchemyStore.get_registered_model
    released = []

    def released_before_the_read(store, name):
        if name == registry.lock_name and not released:
            released.append(name)
            holder.delete_registered_model(name)
        return read_existing(store, name)

    monkeypatch.setattr(SqlAlchemyStore, "get_registered_model", released_before_the_read)
    with registry.locked(wait_seconds=10):
        owner = registry.client.get_registered_model(registry.lock_name).tags["ctpipe.lock_owner"]
    assert released and owner != "other"
    assert registry.lock_name not in {m.name for m in registry.client.search_registered_models()}
