"""An MLflow pyfunc wrapper around the ctpipe export: raw rows in, the task's ``serve`` output out.

We wrap our own export rather than use ``mlflow.pytorch.log_model``: a task's network may take several
tensors (the tabular models take numeric and categorical ones) built by the task's own encoding, which
the pytorch flavor's single-tensor pyfunc and its ``pt2`` (torch.export) format cannot express; the
wrapper serves raw rows with the model's own train-split statistics. For a classifier the output is the
predicted class, then one probability column per class; a language model's is each document's loss and a
continuation. The model ships the code it imports (MLflow ``code_paths``: ctpipe's package and the user's task
package, ``model_files.py``), so a server needs only its ``requirements.txt``.

Loading trusts nothing it reads before checking it: the export's SHA-256 must be the one registration wrote
into the model's own config (``EXPORT_DIGEST``) before ``torch.load`` reads it, and its task record may name
only a built-in task or the task code shipped in the model's ``code`` folder (``check_served_task``). Loading
logs a warning when that task code is not the code the model was trained with (the export's ``task_code``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import mlflow.pyfunc
import pandas as pd

logger = logging.getLogger(__name__)

# The pyfunc's model_config key holding the export's SHA-256, written at registration.
EXPORT_DIGEST = "ctpipe_export_sha256"
# The pyfunc's model_config key naming the data's key column (optional in its signature): the prediction log's key.
KEY_COLUMN = "ctpipe_key_column"
# MLflow keeps a pyfunc's artifacts in <model>/artifacts and its code_paths in <model>/code.
CODE_FOLDER = "code"


class CtpipeClassifier(mlflow.pyfunc.PythonModel):
    """Loads ``artifacts['export']`` and returns what the export's task serves for the rows."""

    def load_context(self, context) -> None:
        from ctpipe.components.tasks.export import load_model_export
        from ctpipe.components.tasks.trusted_code import check_served_task

        export = Path(context.artifacts["export"])
        check_export_digest(export, (context.model_config or {}).get(EXPORT_DIGEST))
        code_dir = export.parent.parent / CODE_FOLDER
        self._model = load_model_export(export, check_task=functools.partial(check_served_task, code_dir=code_dir))
        warn_if_served_with_other_task_code(self._model)
        self._log = open_prediction_log((context.model_config or {}).get(KEY_COLUMN))

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        served = self._model.serve(model_input)
        log = getattr(self, "_log", None)
        if log is not None:
            log.log(model_input, served)  # queues only; never raises (components/lib/prediction_log.py)
        return served


def open_prediction_log(key_column: str | None):
    """The prediction log the serving environment asks for (``CTPIPE_PREDICTION_LOG``), else None; ``key_column``:
    the data's key the model was registered with. A log that cannot be opened is reported, never fatal."""
    from ctpipe.components.lib.prediction_log import PredictionLog

    try:
        return PredictionLog.from_environment(key_column=key_column)
    except Exception as err:  # a bad setting must not stop the model from serving
        logger.warning("the prediction log is off: %s: %s", type(err).__name__, err)
        return None


def check_export_digest(export: Path, expected: str | None) -> None:
    """UntrustedModelError unless the export's bytes have the SHA-256 registration recorded (before any unpickling)."""
    from ctpipe.components.lib.registry.model_files import UntrustedModelError, sha256_file

    if not expected:
        raise UntrustedModelError(f"the model has no '{EXPORT_DIGEST}' in its model_config: it was not registered by "
                                  "a ctpipe that records it, or its MLmodel file was altered; refusing to load it")
    actual = sha256_file(export)
    if actual != expected:
        raise UntrustedModelError(
            f"the model's export '{export}' has SHA-256 {actual}, but registration recorded {expected} "
            f"({EXPORT_DIGEST}): the file was rewritten after registration; refusing to load it")


def warn_if_served_with_other_task_code(model) -> None:
    """Log a warning when the task code installed here is not the code ``model`` (an ``ExportedModel``) recorded."""
    from ctpipe.components.tasks.code_identity import describe, same_code, task_code_identity

    if model.task_code is None:  # exported before the task code was recorded: nothing to compare
        return
    serving = task_code_identity(model.task_record)
    if serving.get("version") is None:
        # The code the model ships (its code folder is no installed distribution, so no version): the source
        # digest says whether it is the code the model was trained with.
        same = all(model.task_code.get(k) == serving.get(k) for k in ("entrypoint", "source_sha256"))
    else:
        same = same_code(model.task_code, serving)
    if not same:
        logger.warning(
            "this model was trained with task code %s; it is served here with %s: its predictions are what this "
            "code makes of its weights, not necessarily what its evaluation measured. Serve it with the ctpipe "
            "(and task package) it was trained with.", describe(model.task_code), describe(serving))
