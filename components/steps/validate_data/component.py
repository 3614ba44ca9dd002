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

    ``data_fingerprint`` is prepare_run's fingerprint of ``data_uri``'s content, what makes KFP's cache key
    change when the data behind the same URI does: data that changed since (validation reads another
    version) fails the step, so no cache entry keyed on one version holds another's snapshot."""
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("validate_data", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        config = Config.from_json(config_json)
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.validate_data.on_spark_cluster import runs_on_spark_cluster
        if runs_on_spark_cluster(data_uri, config):  # engine spark (or auto, many rows) on a cluster: a SparkApplication
            from ctpipe.components.steps.validate_data.on_spark_cluster import (
                validate_on_spark_cluster as validate,
            )
        else:
            from ctpipe.components.steps.validate_data.validate import validate_data as validate
        result = validate(
            data_uri,
            config,
            snapshot_dir=snapshot.path,
            data_docs_path=data_docs.path,
            report_path=validation_report.path,
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
        )
        from ctpipe.components.lib.data.content_fingerprint import check_same_data

        check_same_data(data_uri, data_fingerprint, result.fingerprint, when="prepare_run fingerprinted")
        snapshot.metadata.update({"fingerprint": result.fingerprint, "rows": result.rows})
        record.result = {
            "fingerprint": result.fingerprint,
            "rows": result.rows,
            "warnings": result.warnings,
            "snapshot": snapshot.path,
            "data_docs": result.data_docs,  # with its extension: the run summary prints it
        }
    return namedtuple("Validation", ["fingerprint", "warnings"])(result.fingerprint, len(result.warnings))
