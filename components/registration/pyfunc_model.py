"""An MLflow pyfunc wrapper around the ctpipe export: raw feature frame in, class probabilities out.

We wrap our own export rather than use ``mlflow.pytorch.log_model``: the network takes two tensors
(numeric, categorical) built by our preprocessing, which the pytorch flavor's single-tensor pyfunc and
its ``pt2`` (torch.export) format cannot express; the wrapper serves raw rows with the model's own
preprocessing statistics. Serving it needs the ctpipe package (the project image).
"""

from __future__ import annotations

import mlflow.pyfunc
import pandas as pd


class CtpipeClassifier(mlflow.pyfunc.PythonModel):
    """Loads ``artifacts['export']`` and returns one probability column per class."""

    def load_context(self, context) -> None:
        from components.models.export import load_model_export

        self._model = load_model_export(context.artifacts["export"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        probs = self._model.predict_proba(model_input)
        return pd.DataFrame(probs, columns=list(self._model.classes))
