"""Shared test setup: quiet MLflow, torch on one thread in the test process, no pod namespace lent to the tests."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")


@pytest.fixture(autouse=True)
def _outside_any_pod(monkeypatch):
    """A CI runner that is itself a Kubernetes pod must not lend its namespace to the launcher under test
    (tests that play a pod point this at their own file: tests/components/lib/kube/test_namespace.py)."""
    from ctpipe.components.lib.kube import namespace

    monkeypatch.setattr(namespace, "SERVICE_ACCOUNT_NAMESPACE", Path("/nonexistent/ctpipe-tests/serviceaccount/namespace"))


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Torch on one intra-op thread in the test process, whatever the machine's cores: the tiny models the tests
    train here then give the same numbers on every machine with the same vector unit (a reduction split over the
    cores changes its last bits), and run faster on a shared CPU. A test that needs another count sets it."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def spark():
    """One SparkSession (local[2]) for every Spark test: starting one takes ~20-40 s here. Skipped where pyspark or
    Java is missing, except in CI (CTPIPE_REQUIRE_SPARK=1, set by .ci/run), where that is a failure."""
    from ctpipe.components.lib.spark.session import pyspark_missing, spark_session

    problem = pyspark_missing()
    if problem:
        if os.environ.get("CTPIPE_REQUIRE_SPARK"):
            pytest.fail(f"CTPIPE_REQUIRE_SPARK is set but Spark cannot run: {problem}")
        pytest.skip(problem)
    with spark_session("local[2]", app_name="ctpipe-tests") as session:
        yield session
