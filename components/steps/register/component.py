"""KFP adapter: register."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Markdown, Model

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def register(
    model: Input[Model],
    snapshot: Input[Dataset],
    blessing: Input[Artifact],
    validation_report: Input[Markdown],
    sanity_report: Input[Markdown],
    sanity_summary: Input[Artifact],
    model_card: Input[Markdown],
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    pipeline_run_id: str,
    trigger: str,
) -> NamedTuple("Registration", [("model_version", str), ("aliases", str)]):
    """Register the candidate with its lineage; move `champion` to it only if blessed (compare-and-set)."""
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    # The last step: its success ends the pipeline run's MLflow run as FINISHED.
    with step_status("register", mlflow_run=(mlflow_tracking_uri, mlflow_run_id), ends_run=True) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.register.register import register_candidate
        result = register_candidate(
            model.path,
            snapshot.path,
            blessing.path,
            Config.from_json(config_json),
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
            pipeline_run_id=pipeline_run_id,
            trigger=trigger,
            reports={
                "validation": validation_report.path,
                "sanity": sanity_report.path,
                "model_card": model_card.path,
            },
            sanity_summary_path=sanity_summary.path,
        )
        record.result = result.summary()
    return namedtuple("Registration", ["model_version", "aliases"])(result.version, ",".join(result.aliases))
