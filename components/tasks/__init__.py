"""Tasks: the protocol a model and its data reading follow, the built-ins, and resolving one from config.

    from ctpipe.components.tasks import load_task
    task = load_task(config.task)   # tabular_classification by default, or task.entrypoint's factory

``protocol.py`` is the interface (``Task``, ``Batch``, ``Metric``, ``SanitySpec``, ``InitLoss``,
``CheckResult``, ``TaskBase``); ``registry.py`` registers the built-ins and loads the configured task; ``tabular.py`` is
the built-in tabular classification task.
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

__all__ = [
    "BUILTIN_TASKS",
    "Batch",
    "CheckResult",
    "InitLoss",
    "Metric",
    "SanitySpec",
    "Task",
    "TaskBase",
    "TaskError",
    "TaskState",
    "check_evaluation_metrics",
    "check_selection_metric",
    "complete_task",
    "label_column",
    "load_task",
    "task_record",
]
