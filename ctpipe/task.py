"""The public API for bringing your own model: what a user's task module imports.

    from ctpipe.task import Inputs, tabular_task          # a tabular model: write the network, the family does the rest
    from ctpipe.task import Image                         # ... with fixed-size image columns (bytes or arrays)
    from ctpipe.task import TaskSpec, DataCodec, ...      # the full protocol: a spec of typed parts
    from ctpipe.task import TaskBase, task_spec           # a one-class task (deprecated): return task_spec(MyTask())
    from ctpipe.task import task_class                    # a spec as a class to subclass: task_class(make_task)

Everything here is re-exported from ``ctpipe.components.tasks``; import it from this path, which stays put
when the modules behind it move.
"""

from ctpipe.components.lib.metrics import compute_metrics, paired_bootstrap, prior_probabilities
from ctpipe.components.tasks import (
    Batch,
    CheckResult,
    DataCodec,
    DataProfile,
    Demo,
    InitLoss,
    Metric,
    ModelParts,
    Objective,
    SanityChecks,
    SanitySpec,
    Scoring,
    Serving,
    Task,
    TaskBase,
    TaskSpec,
    TaskState,
)
from ctpipe.components.tasks.legacy import task_class, task_spec
from ctpipe.components.tasks.public import Image, Inputs, TaskMetric, tabular_task

__all__ = [
    # the minimal API: a model factory for a task family (classification, regression)
    "Image", "Inputs", "TaskMetric", "tabular_task",
    # the full protocol: a task as a spec of typed parts
    "TaskSpec", "DataCodec", "ModelParts", "Objective", "Scoring", "SanityChecks", "DataProfile", "Serving", "Demo",
    "Batch", "CheckResult", "InitLoss", "Metric", "SanitySpec", "TaskState",
    # the one-class protocol (deprecated): a TaskBase subclass still loads; task_spec(obj) turns it into a spec
    "Task", "TaskBase", "task_spec", "task_class",
    # the classification metrics and the paired bootstrap a task's own metrics can build on
    "compute_metrics", "paired_bootstrap", "prior_probabilities",
]
