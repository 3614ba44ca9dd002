"""KFP adapter: sanity_checks."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def sanity_checks(
    snapshot: Input[Dataset],
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    sanity_report: Output[Markdown],
    first_batch: Output[Artifact],
    sanity_summary: Output[Artifact],
) -> str:
    """Loss at init, overfit one batch and the other cheap checks; a failure stops the run.

    Writes the summary JSON that evaluation and registration read as ``sanity_summary``, and returns the
    same JSON (the train step takes it to run after the gate).
    """
    import json

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.handoffs import SanitySummary
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("sanity_checks", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
        result = run_sanity_checks(
            snapshot.path,
            Config.from_json(config_json),
            report_path=sanity_report.path,
            first_batch_path=first_batch.path,
            summary_path=sanity_summary.path,
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
        )
        # What the sanity_summary file holds (lib/handoffs.SanitySummary), also as the step's result and output.
        summary = SanitySummary(**result.summary()).to_dict()
        record.result = summary
    return json.dumps(summary, sort_keys=True)
