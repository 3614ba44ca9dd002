"""The MLflow retry budget outlasts a tracking server's restart: >= 2 minutes by default, configurable.

Before: 5 retries with waits of 1-15 s, about 30 s in all; an MLflow restart of ~25 s under load failed the run
after its training had finished.
"""

from __future__ import annotations

import threading

import mlflow
import pytest

from ctpipe.components.engine.tracker import make_tracker
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.tracking import RegistryUnavailableError, RetryPolicy, ensure_experiment
from ctpipe.components.run_config import load_config
from ctpipe.testing.mlflow_server import LocalMlflowServer


class FakeClock:
    """Time that passes only when the retry loop sleeps (and a little per attempt)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        self.now += 0.01  # each refused request takes a moment
        return self.now


def server_down() -> None:
    raise ConnectionError("connection refused")


def test_the_default_policy_retries_an_outage_for_at_least_two_minutes_then_says_how_long():
    clock = FakeClock()
    policy = RetryPolicy.of(load_config(None, []).registry)
    with pytest.raises(RegistryUnavailableError, match=r"attempts over 1[2-8]\d\.\ds failed \(retry budget 180s") as err:
        policy.call(server_down, "log the test's results", sleep=clock.sleep, clock=clock)
    assert 120 <= sum(clock.slept) <= 180, clock.slept
    assert max(clock.slept) <= 15  # backoff capped: a server back after 2 minutes is found within 15 s
    assert "registry.retry_budget_seconds" in str(err.value)


def test_the_budget_is_configurable():
    clock = FakeClock()
    policy = RetryPolicy.of(load_config(None, ["registry.retry_budget_seconds=10"]).registry)
    with pytest.raises(RegistryUnavailableError, match=r"retry budget 10s"):
        policy.call(server_down, "log", sleep=clock.sleep, clock=clock)
    assert 0 < sum(clock.slept) <= 10
    with pytest.raises(ConfigError, match=r"registry\.retry_budget_seconds"):
        load_config(None, ["registry.retry_budget_seconds=-1"])


def test_a_tracker_rides_out_a_real_server_restart_and_says_it_waits(tmp_path, caplog):
    server = LocalMlflowServer(tmp_path / "server").start()
    tracker = None
    try:
        experiment = ensure_experiment(server.uri, "ctpipe-test")
        run_id = mlflow.MlflowClient(server.uri).create_run(experiment).info.run_id
        # Short waits, so the test ends soon after the server is back; the budget covers a slow start under load.
        config = load_config(None, ["registry.retry_max_backoff_seconds=2", "registry.retry_budget_seconds=170"])
        tracker = make_tracker(0, server.uri, run_id, retry=RetryPolicy.of(config.registry))
        server.stop()
        restart = threading.Timer(2.0, server.start)
        restart.start()
        try:
            with caplog.at_level("WARNING", logger="ctpipe.components.lib.tracking.retry"):
                tracker.set_tags({"ctpipe.train.status": "finished"})
        finally:
            restart.join()
        assert mlflow.MlflowClient(server.uri).get_run(run_id).data.tags["ctpipe.train.status"] == "finished"
        assert "MLflow unavailable" in caplog.text and "retry budget left" in caplog.text
    finally:
        if tracker is not None:
            tracker.close()
        server.stop()
