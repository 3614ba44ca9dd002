"""An MLflow pyfunc wrapper around the ctpipe export: raw rows in, the task's ``serve`` output out.

We wrap our own export rather than use ``mlflow.pytorch.log_model``: a task's network may take several
tensors (the tabular models take numeric and categorical ones) built by the task's own encoding, which
the pytorch flavor's single-tensor pyfunc and its ``pt2`` (torch.export) format cannot express; the
wrapper serves raw rows with the model's own train-split statistics. For the tabular task the output is
one probability column per class. Serving it needs the ctpipe package (the project image) and, for a
user's task, the package its ``task.entrypoint`` names; loading it logs a warning when that task code is not
the code the model was trained with (the export's ``task_code``): its rows are then encoded and served by
other code than the code its evaluation measured.
"""

from __future__ import annotations

import logging

import mlflow.pyfunc
import pandas as pd

logger = logging.getLogger(__name__)


class CtpipeClassifier(mlflow.pyfunc.PythonModel):
    """Loads ``artifacts['export']`` and returns what the export's task serves for the rows."""

    def load_context(self, context) -> None:
        from ctpipe.components.tasks.export import load_model_export

        self._model = load_model_export(context.artifacts["export"])
        warn_if_served_with_other_task_code(self._model)

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self._model.serve(model_input)


def warn_if_served_with_other_task_code(model) -> None:
    """Log a warning when the task code installed here is not the code ``model`` (an ``ExportedModel``) recorded."""
    from ctpipe.components.tasks.code_identity import describe, same_code, task_code_identity

    if model.task_code is None:  # exported before the task code was recorded: nothing to compare
        return
    serving = task_code_identity(model.task_record)
    if not same_code(model.task_code, serving):
        logger.warning(
            "this model was trained with task code %s; it is served here with %s: its predictions are what this "
            "code makes of its weights, not necessarily what its evaluation measured. Serve it with the ctpipe "
            "(and task package) it was trained with.", describe(model.task_code), describe(serving))
