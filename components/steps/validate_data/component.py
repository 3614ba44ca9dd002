"""KFP adapter: validate_data."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Dataset, Markdown, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def validate_data(
    data_uri: str,
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    snapshot: Output[Dataset],
    data_docs: Output[HTML],
    validation_report: Output[Markdown],
    data_fingerprint: str = "",
) -> NamedTuple("Validation", [("fingerprint", str), ("warnings", int)]):
    """Fingerprint and split the data, run the Great Expectations suite, write Data Docs.

    ``data_fingerprint`` is prepare_run's cheap fingerprint of ``data_uri``: unused here, it is what makes
    KFP's cache key change when the data behind the same URI does."""
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("validate_data", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.validate_data.validate import validate_data as validate
        result = validate(
            data_uri,
            Config.from_json(config_json),
            snapshot_dir=snapshot.path,
            data_docs_path=data_docs.path,
            report_path=validation_report.path,
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
        )
        snapshot.metadata.update({"fingerprint": result.fingerprint, "rows": result.rows})
        record.result = {
            "fingerprint": result.fingerprint,
            "rows": result.rows,
            "warnings": result.warnings,
            "snapshot": snapshot.path,
            "data_docs": result.data_docs,  # with its extension: the run summary prints it
        }
    return namedtuple("Validation", ["fingerprint", "warnings"])(result.fingerprint, len(result.warnings))
