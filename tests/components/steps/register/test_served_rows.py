"""Registration refuses a model whose served output (what the registered pyfunc returns) does not hold one row per
input row: no version is created, the champion is unchanged."""

from __future__ import annotations

import dataclasses

import mlflow
import pytest

from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.tasks import export
from ctpipe.components.tasks.outputs import TaskOutputError
from tests.components.steps.evaluate.test_row_alignment import Wrapped
from tests.components.steps.register.test_register import _cycle, models  # noqa: F401
from tests.fixtures.registry import fast_config


def test_a_model_serving_one_row_less_is_not_registered(models, tmp_path, monkeypatch):  # noqa: F811
    config = fast_config()
    _, _, register = _cycle(models, tmp_path, "a", "p1", config)
    loaded = export.load_model_export

    def serving_one_row_less(path):
        model = loaded(path)
        return dataclasses.replace(model, task=Wrapped(
            model.task, serve=lambda net, frame, state: model.task.serving.serve(net, frame, state).iloc[:-1]))

    monkeypatch.setattr(export, "load_model_export", serving_one_row_less)
    with pytest.raises(TaskOutputError, match=r"serve returned 4 row\(s\) for a frame of 5 row\(s\)"):
        register()
    client = mlflow.MlflowClient(local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path))
    assert client.search_model_versions(f"name='{config.registry.model_name}'") == []


def test_a_model_serving_its_rows_in_another_order_is_not_registered(models, tmp_path, monkeypatch):  # noqa: F811
    # Before: only the count of served rows was checked, so a serve that sorts its rows (a sort_values or groupby
    # in a user's task) was registered, and its callers silently got each row's output on another row.
    config = fast_config()
    _, _, register = _cycle(models, tmp_path, "a", "p1", config)
    loaded = export.load_model_export

    def serving_sorted(path):
        model = loaded(path)

        def serve(net, frame, state):
            return model.task.serving.serve(net, frame.sort_values("tenure_months"), state).reset_index(drop=True)

        return dataclasses.replace(model, task=Wrapped(model.task, serve=serve))

    monkeypatch.setattr(export, "load_model_export", serving_sorted)
    with pytest.raises(TaskOutputError, match="serve is not row-aligned"):
        register()
    client = mlflow.MlflowClient(local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path))
    assert client.search_model_versions(f"name='{config.registry.model_name}'") == []
