"""The champion's task: a champion of another task is named as such (and, with task code recorded, which code)."""

from __future__ import annotations

import json
import sys
import textwrap

import mlflow
import pytest
import torch

from components.config import ModelConfig
from components.evaluation.evaluate import MODEL_ARTIFACT_PATH, evaluate_candidate
from components.models.export import save_model_export
from components.tasks.registry import _CACHE
from components.tracking import local_tracking_uri
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot

# A user's task that reads an image column: its models cannot score the tabular test split.
IMAGE_TASK = textwrap.dedent('''
    from components.tasks.tabular import TabularClassification


    class ImageTask(TabularClassification):
        name = "image_task"

        def predict(self, model, frame, state, reference):
            frame["image"]
            return super().predict(model, frame, state, reference)


    def make_task(**options):
        return ImageTask()
''')


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("champion-task")
    snap = make_snapshot(root)
    return {"root": root, "snap": snap, "good": make_model(snap, root / "good.pt", steps=40, seed=0)}


@pytest.fixture
def user_task(tmp_path, monkeypatch):
    """Write a user's task module into a folder on sys.path; forget it afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def write(name: str, source: str) -> None:
        (tmp_path / f"{name}.py").write_text(source)
        names.append(name)

    yield write
    for name in names:
        sys.modules.pop(name, None)
    _CACHE.clear()


def export_as_task(source, path, entrypoint: str):
    """``source``'s export re-written as a model of the task ``entrypoint`` (same weights, state, metadata)."""
    payload = torch.load(source, weights_only=True)
    record = {"name": "tabular_classification", "entrypoint": entrypoint, "options": {}}
    save_model_export(path, payload["state_dict"], ModelConfig(**payload["model_config"]), record,
                      payload["preprocessing"], payload["metadata"])
    return path


def make_champion(uri: str, config, model_file) -> str:
    """``model_file`` registered as the champion, the way registration leaves it (its run holds the export)."""
    run_id = make_run(uri, config, "champion")
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    client.log_artifact(run_id, str(model_file), "ctpipe")
    assert MODEL_ARTIFACT_PATH == f"ctpipe/{model_file.name}"
    client.create_registered_model(config.registry.model_name)
    version = client.create_model_version(config.registry.model_name, "file:///x", run_id=run_id).version
    client.set_registered_model_alias(config.registry.model_name, config.registry.champion_alias, version)
    return str(version)


def evaluate(world, tmp_path, config, uri):
    return evaluate_candidate(
        str(world["good"]), str(world["snap"]), config, tracking_uri=uri, mlflow_run_id=make_run(uri, config, "p2"),
        blessing_path=str(tmp_path / "blessing.json"), card_path=str(tmp_path / "card.md"),
    )


def test_a_champion_of_another_task_is_named_with_both_tasks_and_the_fix(world, tmp_path, user_task):
    user_task("image_task", IMAGE_TASK)
    config, uri = fast_config(), local_tracking_uri(tmp_path)
    (tmp_path / "champ").mkdir()
    champion = export_as_task(world["good"], tmp_path / "champ" / "model.pt", "image_task:make_task")
    make_champion(uri, config, champion)
    result = evaluate(world, tmp_path, config, uri)
    assert not result.blessed and result.champion_metrics is None
    first = result.reasons[0]
    assert "champion version 1 cannot score the current test split: 'image'" in first
    assert "task 'image_task' (task.entrypoint image_task:make_task)" in first
    assert "task 'tabular_classification' (built-in)" in first
    assert "its own registry.model_name" in first
    assert json.loads((tmp_path / "blessing.json").read_text())["champion_error"].startswith(first.split(";")[0])
