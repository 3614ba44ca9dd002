"""KFP adapter: tune."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Artifact, Dataset, Input, Metrics, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def tune(
    snapshot: Input[Dataset],
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    job_name: str,
    sanity_summary: str,
    trials: Output[Artifact],
    tune_report: Output[HTML],
    tune_metrics: Output[Metrics],
) -> NamedTuple("Tuning", [("tuned_config_json", str)]):
    """Search the hyperparameters of ``tune.space``: each trial a training job, judged on the validation split.

    Hands on the config training gets (the best trial's values applied); ``sanity_summary`` (the gate's output)
    orders the search after the gate. The report is the KFP UI's HTML; each trial is an MLflow child run.
    """
    import json
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("tune", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.tune.tune import tune_hyperparameters

        result = tune_hyperparameters(
            snapshot.path,
            trials.path,
            Config.from_json(config_json),
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
            job_name=job_name,
            report_path=tune_report.path,
        )
        chosen = result.summary.get("chosen") or {}
        metrics = {"trials": float(len(result.outcomes)),
                   **({f"best_{result.summary['metric']}": chosen["objective"]} if chosen else {})}
        for name, value in metrics.items():
            tune_metrics.log_metric(name, value)
        # KFP's local cache treats an output artifact without its file as missing (as the train step's metrics).
        from ctpipe.components.lib.atomic_files import atomic_write_text

        atomic_write_text(tune_metrics.path, json.dumps(metrics, sort_keys=True))
        record.result = result.summary
    return namedtuple("Tuning", ["tuned_config_json"])(result.config.to_json())
