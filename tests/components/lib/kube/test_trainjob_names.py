"""A TrainJob's name must leave room for the pod names the JobSet under it creates.

Trainer v2 creates a JobSet named like the TrainJob, with one replicated job ``node`` whose Indexed Job runs
``numNodes`` pods named ``<trainjob>-node-0-<index>-<5 random>``. JobSet's admission webhook
(kubernetes-sigs/jobset pkg/webhooks/jobset_webhook.go) refuses the JobSet when the longest such name,
checked as ``<name>-node-0-<numNodes-1>-abcde``, is not a DNS-1035 label of at most 63 characters. The
TrainJob itself is accepted, so the train step would wait for pods that never come.
"""

from __future__ import annotations

import re

import pytest

from ctpipe.components.lib.kube.trainjob import NODE, JobValidationError, build_trainjob, validate_trainjob
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch

# The KFP run id the train step passes as the launch name (dsl.PIPELINE_JOB_ID_PLACEHOLDER).
KFP_RUN_ID = "8f0c1a2e-5d1b-4c8e-9a9e-0123456789ab"
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _longest_jobset_pod_name(job: dict) -> str:
    """What JobSet's webhook checks: GenPodName(jobset, rjob, maxJobIndex, maxPodIndex) + "-abcde"."""
    nodes = job["spec"]["trainer"]["numNodes"]
    return f"{job['metadata']['name']}-{NODE}-0-{nodes - 1}-abcde"


def _trainjob(nodes: int) -> dict:
    config = load_config(overrides=["train.backend=trainjob", "kubernetes.namespace=team-b"])
    launch = WorkerLaunch(job_name=KFP_RUN_ID, world_size=nodes,
                          command=["python", "-m", "ctpipe.components.steps.train.worker"], env={}, deadline_seconds=60)
    return build_trainjob(config.kubernetes, launch)


@pytest.mark.parametrize("nodes", [1, 10, 11, 16, 100, 1000])
def test_a_kfp_runs_trainjob_leaves_room_for_its_jobset_pod_names(nodes):
    job = _trainjob(nodes)
    validate_trainjob(job)
    pod = _longest_jobset_pod_name(job)
    assert len(pod) <= 63 and DNS1035.match(pod), (len(pod), pod)


def test_a_trainjob_name_too_long_for_its_pods_is_refused():
    job = _trainjob(11)
    job["metadata"]["name"] = "ctpipe-train-" + "a" * 35  # 48 characters: 64 with "-node-0-10-abcde"
    with pytest.raises(JobValidationError, match="invalid and was not submitted") as err:
        validate_trainjob(job)
    assert "metadata.name" in str(err.value) and "63 characters" in str(err.value)
