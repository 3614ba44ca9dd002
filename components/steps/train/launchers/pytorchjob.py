"""``Launcher`` backend ``pytorchjob``: a Kubeflow Training Operator v1 PyTorchJob (Master + Workers).

The job object is components/lib/kube/pytorchjob.py's; following it is the generic launcher's (kubeflow.py).
"""

from __future__ import annotations

from ctpipe.components.lib.kube import pytorchjob as pj
from ctpipe.components.steps.train.launchers.job_client import JobAPI
from ctpipe.components.steps.train.launchers.kubeflow import KubeflowJobLauncher

PYTORCHJOB = JobAPI(
    group=pj.GROUP,
    version=pj.VERSION,
    plural=pj.PLURAL,
    kind=pj.KIND,
    build=pj.build_pytorchjob,
    validate=pj.validate_pytorchjob,
    container=pj.CONTAINER,
    rank0_selector=pj.master_selector,
    pods_selector=pj.job_selector,
    rank0_label=(pj.LABEL_REPLICA_TYPE, "master"),
)


class PyTorchJobLauncher(KubeflowJobLauncher):
    """One PyTorchJob per launch: rank 0 on the Master pod, the other ranks on Worker pods."""

    api = PYTORCHJOB
