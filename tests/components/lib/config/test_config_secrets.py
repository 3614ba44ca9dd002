"""A config never carries secrets: it is copied into MLflow tags, model exports, summaries and argv."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError


@pytest.mark.parametrize("uri", [
    "http://admin:hunter2@mlflow:5000",
    "https://admin:hunter2@mlflow.example.com/prefix",
    "postgresql://ctpipe:hunter2@db:5432/mlflow",
])
def test_a_tracking_uri_with_credentials_is_refused_without_echoing_them(uri):
    with pytest.raises(ConfigError, match=r"registry\.tracking_uri.*credentials") as info:
        Config.from_dict({"registry": {"tracking_uri": uri}})
    assert "hunter2" not in str(info.value)
    assert "MLFLOW_TRACKING_USERNAME" in str(info.value)


@pytest.mark.parametrize("uri", [
    "http://mlflow:5000", "https://mlflow.example.com/a@b", "sqlite:////home/u/mlflow.db", "databricks", "file:///x",
])
def test_a_tracking_uri_without_credentials_is_accepted(uri):
    assert Config.from_dict({"registry": {"tracking_uri": uri}}).registry.tracking_uri == uri
