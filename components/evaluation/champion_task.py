"""What evaluation says about the champion's task: whether it is the candidate's task at all.

A registered model (``registry.model_name``) holds versions of one task; a champion of another task
(e.g. registered under the same name by another pipeline) cannot be scored on this task's test split,
and its error alone ("KeyError: 'image'") would not say why.
"""

from __future__ import annotations

from typing import Any


def task_label(task: Any, record: dict[str, Any]) -> str:
    """'name' (task.entrypoint x) for a user's task, 'name' (built-in) for ctpipe's."""
    entrypoint = record.get("entrypoint")
    return f"'{task.name}' ({f'task.entrypoint {entrypoint}' if entrypoint else 'built-in'})"


def same_task(candidate: Any, champion: Any) -> bool:
    """Whether two ``ExportedModel``s are of one task (its name and entrypoint; options may differ)."""
    return (candidate.task.name, candidate.task_record.get("entrypoint")) == (
        champion.task.name, champion.task_record.get("entrypoint"))


def other_task_error(candidate: Any, champion: Any, error: str) -> str:
    """``error`` of a champion that could not score this split, naming both tasks when they differ."""
    if same_task(candidate, champion):
        return error
    return (
        f"{error}: it is a model of task {task_label(champion.task, champion.task_record)}, the candidate one of "
        f"task {task_label(candidate.task, candidate.task_record)}. Give each task its own registry.model_name "
        f"(e.g. --set registry.model_name=<name>-{candidate.task.name}), so that each is compared with a champion "
        "of its own task"
    )
