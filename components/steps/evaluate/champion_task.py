"""What evaluation says about the champion's task: whether it is the candidate's task, and which code scores it.

A registered model (``registry.model_name``) holds versions of one task; a champion of another task
(e.g. registered under the same name by another pipeline) cannot be scored on this task's test split,
and its error alone ("KeyError: 'image'") would not say why.

The champion is rebuilt and scored with the task code installed today. When that is not the code it was
trained with (its export's ``task_code``), its score is what today's ``encode``/``predict`` make of its
weights, not what production serves: said plainly, but not blocking (every code change would otherwise
stall continuous training until someone promoted by hand).
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.tasks.code_identity import describe, same_code, task_code_identity


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


def champion_task_code(champion: Any, version: str | None) -> dict[str, Any]:
    """The champion's recorded task code beside the code scoring it now; ``note`` says when they differ."""
    recorded, scoring = champion.task_code, task_code_identity(champion.task_record)
    if recorded is None:
        same, note = None, (f"task code of champion version {version} not recorded (exported before ctpipe recorded "
                            f"it); it is scored here with {describe(scoring)}")
    elif same_code(recorded, scoring):
        same, note = True, None
    else:
        same, note = False, (f"champion version {version} was trained with task code {describe(recorded)}; it is "
                             f"scored here with {describe(scoring)}: its score is what today's code makes of its "
                             "weights")
    return {"recorded": recorded, "scoring": scoring, "same": same, "note": note}
