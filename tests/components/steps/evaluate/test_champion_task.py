"""The champion's task: a champion of another task is named as such (and, with task code recorded, which code)."""

from __future__ import annotations

import json
import sys
import textwrap

import mlflow
import pytest
import torch

from ctpipe.components.lib.config import ModelConfig
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import MODEL_ARTIFACT_PATH, evaluate_candidate
from ctpipe.components.tasks.export import save_model_export
from ctpipe.components.tasks.registry import _CACHE
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot

# A user's task that reads an image column: its models cannot score the tabular test split.
IMAGE_TASK = textwrap.dedent('''
    from ctpipe.components.tasks.tabular import TabularClassification


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


USER_TASK = textwrap.dedent('''
    from ctpipe.components.tasks.tabular import TabularClassification


    class UserTabular(TabularClassification):
        name = "user_tabular"


    def make_task(**options):
        return UserTabular()
''')


def test_a_champion_scored_by_other_task_code_than_it_was_trained_with_is_said_plainly_not_blocked(
        world, tmp_path, user_task):
    user_task("user_tabular", USER_TASK)
    config, uri = fast_config(), local_tracking_uri(tmp_path)
    (tmp_path / "champ").mkdir()
    champion = export_as_task(world["good"], tmp_path / "champ" / "model.pt", "user_tabular:make_task")
    recorded = torch.load(champion, weights_only=True)["task_code"]
    assert recorded["name"] == "user_tabular" and recorded["entrypoint"] == "user_tabular:make_task"
    make_champion(uri, config, champion)
    # Between the champion's training and today, the user changed their task's code.
    (tmp_path / "user_tabular.py").write_text(USER_TASK + "\nSCALE = 2.0  # a changed preprocessing\n")

    result = evaluate(world, tmp_path, config, uri)
    assert result.champion_metrics is not None  # scored and compared, not blocked
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    assert blessing["champion_error"] is None
    code = blessing["champion_task_code"]
    assert code["same"] is False and code["recorded"] == recorded
    assert code["scoring"]["source_sha256"] != recorded["source_sha256"]
    note = next(r for r in result.reasons if "was trained with task code" in r)
    assert note.startswith("champion version 1 was trained with task code user_tabular:make_task")
    assert recorded["source_sha256"][:12] in note and code["scoring"]["source_sha256"][:12] in note
    assert note.endswith("its score is what today's code makes of its weights")
    assert note in (tmp_path / "card.md").read_text()
    assert blessing["task_code"]["entrypoint"] == "ctpipe.components.tasks.tabular:make_task"


def test_a_champion_scored_by_its_own_task_code_gets_no_note(world, tmp_path):
    config, uri = fast_config(), local_tracking_uri(tmp_path)
    (tmp_path / "champ").mkdir()
    champion = make_model(world["snap"], tmp_path / "champ" / "model.pt", steps=40, seed=1)
    make_champion(uri, config, champion)
    result = evaluate(world, tmp_path, config, uri)
    code = json.loads((tmp_path / "blessing.json").read_text())["champion_task_code"]
    assert code["same"] is True and code["note"] is None
    assert not any("task code" in r for r in result.reasons)
    assert "champion's task code: the code it was trained with" in (tmp_path / "card.md").read_text()


def test_a_champion_exported_before_task_code_was_recorded_says_so(world, tmp_path):
    config, uri = fast_config(), local_tracking_uri(tmp_path)
    (tmp_path / "champ").mkdir()
    payload = torch.load(world["good"], weights_only=True)
    del payload["task_code"], payload["build_config"]  # as exported before either was recorded
    torch.save(payload, tmp_path / "champ" / "model.pt")
    make_champion(uri, config, tmp_path / "champ" / "model.pt")
    result = evaluate(world, tmp_path, config, uri)
    assert result.champion_metrics is not None
    assert any(r.startswith("task code of champion version 1 not recorded") for r in result.reasons)
    assert json.loads((tmp_path / "blessing.json").read_text())["champion_task_code"]["same"] is None
