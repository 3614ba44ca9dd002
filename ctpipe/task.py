"""The public API for bringing your own model: what a user's task module imports.

    from ctpipe.task import Inputs, tabular_task          # a tabular model: write the network, the family does the rest
    from ctpipe.task import Image                         # ... with fixed-size image columns (bytes or arrays)
    from ctpipe.task import TaskBase, Batch, SanitySpec   # the full protocol (images, text, anything else)

Everything here is re-exported from ``ctpipe.components.tasks``; import it from this path, which stays put
when the modules behind it move.
"""

from ctpipe.components.lib.metrics import compute_metrics, paired_bootstrap, prior_probabilities
from ctpipe.components.tasks import (
    Batch,
    CheckResult,
    InitLoss,
    Metric,
    SanitySpec,
    Task,
    TaskBase,
    TaskState,
)
from ctpipe.components.tasks.public import Image, Inputs, TaskMetric, tabular_task

__all__ = [
    # the minimal API: a model factory for a task family (classification, regression)
    "Image", "Inputs", "TaskMetric", "tabular_task",
    "Batch", "CheckResult", "InitLoss", "Metric", "SanitySpec", "Task", "TaskBase", "TaskState",
    # the classification metrics and the paired bootstrap a task's own metrics can build on
    "compute_metrics", "paired_bootstrap", "prior_probabilities",
]
