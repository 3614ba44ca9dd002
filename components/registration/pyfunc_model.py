"""An MLflow pyfunc wrapper around the ctpipe export: raw rows in, the task's ``serve`` output out.

We wrap our own export rather than use ``mlflow.pytorch.log_model``: a task's network may take several
tensors (the tabular models take numeric and categorical ones) built by the task's own encoding, which
the pytorch flavor's single-tensor pyfunc and its ``pt2`` (torch.export) format cannot express; the
wrapper serves raw rows with the model's own train-split statistics. For the tabular task the output is
one probability column per class. Serving it needs the ctpipe package (the project image) and, for a
user's task, the package its ``task.entrypoint`` names.
"""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd


class CtpipeClassifier(mlflow.pyfunc.PythonModel):
    """Loads ``artifacts['export']`` and returns what the export's task serves for the rows."""

    def load_context(self, context) -> None:
        from components.models.export import load_model_export

        self._model = load_model_export(context.artifacts["export"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return self._model.serve(model_input)
