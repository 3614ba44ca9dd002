"""``Launcher`` backend ``trainjob``: a Kubeflow Trainer v2 TrainJob, followed like the PyTorchJob.

Same contract as the PyTorchJob backend (deterministic name and re-attach, strict validation, watch with
polling fallback, rank-0 log streaming, failure reason with the failing pod's log, delete on timeout and
SIGTERM: all the generic launcher's, kubeflow.py); only the object (components/lib/kube/trainjob.py) and the
pods' labels differ.
"""

from __future__ import annotations

from ctpipe.components.lib.kube import trainjob as tj
from ctpipe.components.steps.train.launchers.job_client import JobAPI
from ctpipe.components.steps.train.launchers.kubeflow import KubeflowJobLauncher

TRAINJOB = JobAPI(
    group=tj.GROUP,
    version=tj.VERSION,
    plural=tj.PLURAL,
    kind=tj.KIND,
    build=tj.build_trainjob,
    validate=tj.validate_trainjob,
    container=tj.NODE,
    rank0_selector=tj.rank0_selector,
    pods_selector=tj.node_selector,
    rank0_label=(tj.LABEL_COMPLETION_INDEX, "0"),
)


class TrainJobLauncher(KubeflowJobLauncher):
    """One TrainJob per launch on the ``kubernetes.trainjob_runtime`` ClusterTrainingRuntime."""

    api = TRAINJOB
