"""The PyTorchJob (or TrainJob) the train step would submit, and with ``validation.engine: spark`` the validate
step's SparkApplication, rendered offline with run-time values as placeholders.

``ctpipe render-job`` prints them. Each comes from the same launch builder (``build_launch``,
``build_spark_launch``) and the same launcher ``plan`` (staging, build, strict validation) as a real run, with
sample values where the run's own are known only at run time; nothing is created, deleted or contacted.

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
from ctpipe.components.lib.kube.sparkapplication import application_name
from ctpipe.components.steps.train.launch import build_launch
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for
from ctpipe.components.steps.validate_data.on_spark_cluster import build_spark_launch
from ctpipe.components.steps.validate_data.spark_launcher import SparkApplicationLauncher

RUN_ID = "${PIPELINE_RUN_ID}"
MLFLOW_RUN_ID = "${MLFLOW_RUN_ID}"
TRACKING_URI = "${MLFLOW_TRACKING_URI}"
NAMESPACE = "${NAMESPACE}"
SNAPSHOT = "${SNAPSHOT_DIR}"
CHECKPOINTS = "${CHECKPOINT_DIR}"
DATA_URI = "${DATA_URI}"
DATA_DOCS = "${DATA_DOCS}"
REPORT = "${VALIDATION_REPORT}"
RESULT = "${RESULT_FILE}"
# A stand-in run id that makes a valid name for validation; replaced by RUN_ID in the output.
_SAMPLE_RUN_ID = "00000000-0000-4000-8000-000000000000"
# Likewise for an unset kubernetes.namespace (the train step's own, known only at run time).
_SAMPLE_NAMESPACE = "ctpipe-render"
# The step's artifact paths exist only at run time. Absolute, as the step's are, so a shared PVC stages
# them like the real ones; never created.
_SAMPLE_SNAPSHOT = "/ctpipe-render/snapshot"
_SAMPLE_CHECKPOINTS = "/ctpipe-render/checkpoints"
_SAMPLE_DATA_DOCS = "/ctpipe-render/data_docs"
_SAMPLE_REPORT = "/ctpipe-render/validation_report"
_SAMPLE_RESULT = "/ctpipe-render/validation_result.json"


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


def render_sparkapplication(config: Config) -> dict[str, Any]:
    """The validated SparkApplication the validate step submits (``validation.engine: spark``), with placeholders."""
    launch = build_spark_launch(DATA_URI, config, snapshot_dir=_SAMPLE_SNAPSHOT, data_docs_path=_SAMPLE_DATA_DOCS,
                                report_path=_SAMPLE_REPORT, result_path=_SAMPLE_RESULT, launch_name=_SAMPLE_RUN_ID)
    namespace = config.kubernetes.namespace or _SAMPLE_NAMESPACE
    placeholders = {application_name(_SAMPLE_RUN_ID): f"ctpipe-validate-{RUN_ID}", _SAMPLE_RUN_ID: RUN_ID,
                    _SAMPLE_SNAPSHOT: SNAPSHOT, _SAMPLE_DATA_DOCS: DATA_DOCS, _SAMPLE_REPORT: REPORT,
                    _SAMPLE_RESULT: RESULT}
    try:
        app, _ = SparkApplicationLauncher(config, api_client=None, namespace=namespace).plan(launch)
    except JobValidationError as err:
        raise JobValidationError(_substitute(str(err), placeholders)) from None
    app = _substitute(app, placeholders)
    if not config.kubernetes.namespace:
        app["metadata"]["namespace"] = NAMESPACE
    return app


def render_pytorchjob_yaml(config: Config) -> str:
    """YAML of ``render_pytorchjob`` with a header that names the placeholders; under ``train.backend: auto``
    both kinds, TrainJob first (the one chosen where Trainer v2 is installed), as two YAML documents. With
    ``validation.engine: spark`` the validate step's SparkApplication comes first (it runs first)."""
    documents, note = [], ""
    if config.validation.engine != "local":
        documents.append(render_sparkapplication(config))
        note += (f"# validation.engine={config.validation.engine}: the validate step submits the first document (a "
                 "SparkApplication of the\n# Kubeflow Spark Operator 2.5)"
                 + (f" when the data has more than validation.spark_min_rows={config.validation.spark_min_rows} rows"
                    if config.validation.engine == "auto" else "") + "; the train step the job(s) after it.\n")
    if config.train.backend == "auto":
        note += (
            "# train.backend=auto: the train step submits the TrainJob where the cluster serves\n"
            f"# trainjobs.trainer.kubeflow.org and ClusterTrainingRuntime {config.kubernetes.trainjob_runtime!r},\n"
            "# else the PyTorchJob after it; see docs/cluster.md.\n"
        )
        documents += [render_pytorchjob(config, backend=kind) for kind in ("trainjob", "pytorchjob")]
    else:
        documents.append(render_pytorchjob(config))
    return note + _header() + "---\n".join(yaml.safe_dump(d, sort_keys=False, width=120) for d in documents)


def _header() -> str:
    return (
        "# What the steps submit, each validated strictly against its CRD and the admission rules.\n"
        f"# Set at run time: {RUN_ID} (KFP run id; the real name is a DNS-1035 label derived from it),\n"
        f"# {MLFLOW_RUN_ID}, {TRACKING_URI}; {NAMESPACE} is the namespace the train step runs in (when\n"
        f"# kubernetes.namespace is unset); {SNAPSHOT}/{CHECKPOINTS} (and the validate step's {DATA_DOCS},\n"
        f"# {REPORT}, {RESULT}) stand for the steps' artifact paths (in a refusal; a job shows them staged under\n"
        f"# the shared volume's mount); {DATA_URI} is the run's data_uri.\n"
    )
