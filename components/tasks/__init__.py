"""Tasks: what a model and its data reading give ctpipe, the built-ins, and resolving one from config.

    from ctpipe.components.tasks import load_task
    task = load_task(config.task)   # a TaskSpec: tabular_classification by default, or task.entrypoint's factory
    task.codec.encode(frame, state) # each consumer takes the part it uses

``spec.py`` is the task as a spec of typed parts (``TaskSpec``: codec, model, objective, scoring, checks,
profile, serving, defaults, demo); ``protocol.py`` the shared types (``Batch``, ``Metric``, ``SanitySpec``,
``InitLoss``, ``CheckResult``) and the deprecated one-class protocol (``TaskBase``), which ``legacy.py`` turns
into a spec; ``registry.py`` registers the built-ins and loads the configured task.
"""

from ctpipe.components.tasks.protocol import (
    Batch,
    CheckResult,
    InitLoss,
    Metric,
    SanitySpec,
    Task,
    TaskBase,
    TaskState,
)
from ctpipe.components.tasks.registry import (
    BUILTIN_TASKS,
    TaskError,
    check_evaluation_metrics,
    check_selection_metric,
    complete_task,
    label_column,
    load_task,
    task_record,
)
from ctpipe.components.tasks.spec import (
    DataCodec,
    DataProfile,
    Demo,
    ModelParts,
    Objective,
    SanityChecks,
    Scoring,
    Serving,
    SpecError,
    TaskSpec,
)

__all__ = [
    "BUILTIN_TASKS",
    "Batch",
    "CheckResult",
    "DataCodec",
    "DataProfile",
    "Demo",
    "InitLoss",
    "Metric",
    "ModelParts",
    "Objective",
    "SanityChecks",
    "SanitySpec",
    "Scoring",
    "Serving",
    "SpecError",
    "Task",
    "TaskBase",
    "TaskError",
    "TaskSpec",
    "TaskState",
    "check_evaluation_metrics",
    "check_selection_metric",
    "complete_task",
    "label_column",
    "load_task",
    "task_record",
]
