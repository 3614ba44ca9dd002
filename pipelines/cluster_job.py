"""The PyTorchJob (or TrainJob) the train step would submit, rendered offline with run-time values as placeholders.

``ctpipe render-job`` prints it. The job comes from the same ``build_launch`` and the same launcher
``plan`` (staging, build, strict validation) as a real run, with sample values where the run's own
are known only at run time; nothing is created, deleted or contacted.

Beside compile.py, in the pipeline layer: it shows what the compiled cluster pipeline's
train step submits, so it composes that step (its worker command and launcher) with the Kubernetes objects of
``components/lib/kube`` (which know nothing of training); the CLI imports it, never the step.
"""

from __future__ import annotations

from typing import Any

import yaml

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.kube.names import training_job_name
from ctpipe.components.lib.kube.pod import JobValidationError
from ctpipe.components.steps.train.launch import build_launch
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for

RUN_ID = "${PIPELINE_RUN_ID}"
MLFLOW_RUN_ID = "${MLFLOW_RUN_ID}"
TRACKING_URI = "${MLFLOW_TRACKING_URI}"
NAMESPACE = "${NAMESPACE}"
SNAPSHOT = "${SNAPSHOT_DIR}"
CHECKPOINTS = "${CHECKPOINT_DIR}"
# A stand-in run id that makes a valid name for validation; replaced by RUN_ID in the output.
_SAMPLE_RUN_ID = "00000000-0000-4000-8000-000000000000"
# Likewise for an unset kubernetes.namespace (the train step's own, known only at run time).
_SAMPLE_NAMESPACE = "ctpipe-render"
# The step's artifact paths exist only at run time. Absolute, as the step's are, so a shared PVC stages
# them like the real ones; never created.
_SAMPLE_SNAPSHOT = "/ctpipe-render/snapshot"
_SAMPLE_CHECKPOINTS = "/ctpipe-render/checkpoints"


def _substitute(value: Any, replacements: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


def render_pytorchjob(config: Config, *, backend: str | None = None) -> dict[str, Any]:
    """The validated PyTorchJob (or TrainJob) with placeholders for run-time values; JobValidationError if bad.

    ``backend`` (default ``train.backend``) names the kind; ``auto`` renders the TrainJob it prefers.
    """
    launch = build_launch(_SAMPLE_SNAPSHOT, _SAMPLE_CHECKPOINTS, config, tracking_uri=TRACKING_URI,
                          mlflow_run_id=MLFLOW_RUN_ID, job_name=_SAMPLE_RUN_ID)
    # The job kind follows train.backend; local training renders the PyTorchJob a cluster would run.
    backend = backend or config.train.backend
    if backend == "auto":
        backend = "trainjob"
    namespace = config.kubernetes.namespace or _SAMPLE_NAMESPACE
    name = training_job_name(_SAMPLE_RUN_ID)
    placeholders = {name: f"ctpipe-train-{RUN_ID}", _SAMPLE_RUN_ID: RUN_ID, _SAMPLE_SNAPSHOT: SNAPSHOT,
                    _SAMPLE_CHECKPOINTS: CHECKPOINTS}
    try:
        job, _ = kubeflow_launcher_for(config, backend=backend, api_client=None, namespace=namespace).plan(launch)
    except JobValidationError as err:  # the reason names the run's values, not the samples
        raise JobValidationError(_substitute(str(err), placeholders)) from None
    job = _substitute(job, placeholders)
    if not config.kubernetes.namespace:
        job["metadata"]["namespace"] = NAMESPACE
    return job


def render_pytorchjob_yaml(config: Config) -> str:
    """YAML of ``render_pytorchjob`` with a header that names the placeholders; under ``train.backend: auto``
    both kinds, TrainJob first (the one chosen where Trainer v2 is installed), as two YAML documents."""
    if config.train.backend == "auto":
        note = (
            "# train.backend=auto: the train step submits the first job (TrainJob) where the cluster serves\n"
            f"# trainjobs.trainer.kubeflow.org and ClusterTrainingRuntime {config.kubernetes.trainjob_runtime!r},\n"
            "# else the second (PyTorchJob); see docs/cluster.md.\n"
        )
        documents = [render_pytorchjob(config, backend=kind) for kind in ("trainjob", "pytorchjob")]
        return note + _header() + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in documents)
    return _header() + yaml.safe_dump(render_pytorchjob(config), sort_keys=False, width=120)


def _header() -> str:
    return (
        "# The job the train step submits (validated strictly against the CRD and the admission rules).\n"
        f"# Set at run time: {RUN_ID} (KFP run id; the real name is a DNS-1035 label derived from it),\n"
        f"# {MLFLOW_RUN_ID}, {TRACKING_URI}; {NAMESPACE} is the namespace the train step runs in (when\n"
        f"# kubernetes.namespace is unset); {SNAPSHOT}/{CHECKPOINTS} stand for the step's artifact paths\n"
        "# (in a refusal; a job shows them staged under the shared volume's mount).\n"
    )
