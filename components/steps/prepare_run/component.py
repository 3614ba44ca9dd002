"""KFP adapter: prepare_run."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def prepare_run(
    config_json: str,
    config_overrides: str,
    mlflow_tracking_uri: str,
    pipeline_run_id: str,
    trigger: str,
    data_uri: str,
    trigger_report: Output[HTML],
    default_config_json: str = "",
    run_form: str = "",
    expected_data_fingerprint: str = "",
    trigger_reason: str = "",
    trigger_report_uri: str = "",
    trigger_report_sha256: str = "",
) -> NamedTuple(
    "PreparedRun",
    [("config_json", str), ("mlflow_run_id", str), ("data_fingerprint", str), ("training_run_id", str)],
):
    """Validate the run's config, fingerprint the data's content (hashes cached) and open the run's MLflow runs.

    ``default_config_json`` is the config the pipeline was compiled with: a run whose ``config_json`` is
    empty gets it, not the laptop defaults. ``run_form``: the run form's knobs as ``name=value`` lines
    (the pipeline's typed parameters, ``ctpipe.components.run_config.run_form``); empty: no form.
    ``expected_data_fingerprint``: the data version the run was started for (the watcher's); empty: any.
    ``trigger_reason``: what fired the trigger, in words (recorded on the run, then on the version it registers).
    ``trigger_report_uri`` and ``trigger_report_sha256``: the watcher's report page that started the run and its
    digest, published as ``trigger_report`` (the KFP UI renders it) only when they match (``trigger_page.py``)."""
    from collections import namedtuple

    from ctpipe.components.lib.kfp_support import step_status

    with step_status("prepare_run") as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.prepare_run.prepare import prepare_run as prepare

        prepared = prepare(
            config_json,
            config_overrides,
            tracking_uri=mlflow_tracking_uri,
            pipeline_run_id=pipeline_run_id,
            trigger=trigger,
            data_uri=data_uri,
            default_config_json=default_config_json,
            run_form=run_form,
            expected_fingerprint=expected_data_fingerprint,
            trigger_reason=trigger_reason,
        )
        record.setup_seconds = prepared.mlflow_setup_seconds
        from ctpipe.components.steps.prepare_run.trigger_page import publish_trigger_page

        page = publish_trigger_page(trigger_report_uri, trigger_report_sha256, trigger_report.path,
                                    tracking_uri=mlflow_tracking_uri, trigger=trigger)
        record.result = {
            "mlflow_run_id": prepared.mlflow_run_id,
            "pipeline_run_id": pipeline_run_id,
            "mlflow_experiment_id": prepared.mlflow_experiment_id,
            "data_fingerprint": prepared.data_fingerprint,
            "training_run_id": prepared.training_run_id,
            "trigger_report": page,
        }
    return namedtuple("PreparedRun", ["config_json", "mlflow_run_id", "data_fingerprint", "training_run_id"])(
        prepared.config_json, prepared.mlflow_run_id, prepared.data_fingerprint, prepared.training_run_id
    )
