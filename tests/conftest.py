"""Shared test setup: quiet MLflow, deterministic single-threaded torch in the test process."""

import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
