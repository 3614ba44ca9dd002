"""KFP adapter: select_checkpoint."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def select_checkpoint(
    checkpoints: Input[Artifact],
    snapshot: Input[Dataset],
    config_json: str,
    model: Output[Model],
    mlflow_tracking_uri: str = "",
    mlflow_run_id: str = "",
) -> NamedTuple("Selection", [("step", int), ("metric", float)]):
    """Pick the best evaluated checkpoint by the validation metric and export it as one file.

    ``mlflow_*``: the pipeline run's MLflow run, which this step only ends (FAILED) if selection fails."""
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("select_checkpoint", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.select_checkpoint.select import select_and_export
        selected = select_and_export(checkpoints.path, snapshot.path, Config.from_json(config_json), model.path)
        from ctpipe.components.lib.handoffs import SelectionRecord

        chosen = SelectionRecord(selected.step, selected.metric_name, selected.metric_value, selected.sha256)
        model.metadata.update(chosen.to_dict())
        record.result = {**chosen.to_dict(), "model_path": model.path, "warnings": selected.warnings}
    return namedtuple("Selection", ["step", "metric"])(selected.step, selected.metric_value)
