"""KFP adapter: train."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def train(
    snapshot: Input[Dataset],
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    job_name: str,
    sanity_summary: str,
    checkpoints: Output[Artifact],
    train_metrics: Output[Metrics],
) -> NamedTuple("Training", [("best_step", int), ("steps", int)]):
    """Launch the FSDP2 worker (torchrun locally, a PyTorchJob on a cluster) and wait for it.

    ``sanity_summary`` is the sanity step's output: it orders training after the gate.
    """
    import json
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("train", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.train.launch import train_model
        result = train_model(
            snapshot.path,
            checkpoints.path,
            Config.from_json(config_json),
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
            job_name=job_name,
        )
        # The ranks' interpreter start, imports and rendezvous: start-up inside the step, not its compute.
        record.setup_seconds = float(result.raw.get("worker_startup_seconds") or 0.0)
        metrics = result.metrics()
        for name, value in metrics.items():
            train_metrics.log_metric(name, value)
        # log_metric fills only the artifact's metadata; KFP's local cache treats an output artifact without
        # its file as missing and reruns the step, so the metrics are also the artifact's content.
        from ctpipe.components.lib.atomic_files import atomic_write_text

        atomic_write_text(train_metrics.path, json.dumps(metrics, sort_keys=True))
        record.result = result.summary()
    return namedtuple("Training", ["best_step", "steps"])(result.best_step, result.steps)
