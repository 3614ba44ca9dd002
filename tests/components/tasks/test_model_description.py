"""Reports describe the user's model: its class, parameter count and options, not the tabular model section."""

from __future__ import annotations

from dataclasses import asdict

from torch import nn

from ctpipe.components.lib.config import Config
from ctpipe.components.tasks.model_description import describe_built_model
from ctpipe.components.tasks.protocol import TaskBase


class Wide(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Linear(10, width)
        self.head = nn.Linear(width, 3)


class UserTask(TaskBase):
    name = "wide_task"

    def build_model(self, config, state):
        return Wide(config.task.options["width"])


def test_a_user_task_is_described_by_the_model_it_builds():
    config = Config.from_dict({"task": {"entrypoint": "user:make_task", "options": {"width": 1000}}})
    described = UserTask().describe_model(config, {})
    assert described["kind"] == "Wide" and described["class"].endswith("test_model_description.Wide")
    assert described["parameters"] == 10 * 1000 + 1000 + 1000 * 3 + 3 and described["width"] == 1000
    assert "hidden" not in described  # the tabular model section the user's network never reads


def test_a_model_that_cannot_be_built_without_data_is_described_by_its_task():
    class NeedsState(UserTask):
        def build_model(self, config, state):
            return Wide(state["width"])

    task = NeedsState()
    assert describe_built_model(task.name, task.build_model, Config(), {}) == {"kind": "wide_task"}


def test_the_tabular_tasks_keep_describing_their_model_section():
    from ctpipe.components.tasks import load_task

    config = Config.from_dict({"model": {"hidden": 32}})
    for name in ("tabular_classification", "tabular_regression"):
        task = load_task({"name": name, "entrypoint": None, "options": {}})
        assert task.describe_model(config, {}) == asdict(config.model)
