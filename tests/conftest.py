"""Shared test setup: quiet MLflow, deterministic single-threaded torch in the test process."""

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
