"""Pod Security "restricted" (rules from the Kubernetes documentation) on a pod object, and on every pod the
stand-in controllers create for the jobs ctpipe renders."""

from __future__ import annotations

import copy

import pytest

from ctpipe.components.lib.kube.pod_security import restricted_violations
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.cluster_job import render_pytorchjob
from tests.fakes.controllers import pytorchjob_pods, torch_distributed_runtime, trainjob_pods

COMPLIANT = {
    "spec": {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "c", "image": "i", "securityContext": {
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}],
        "volumes": [{"name": "d", "emptyDir": {}}, {"name": "p", "persistentVolumeClaim": {"claimName": "x"}}],
    }
}


def _broken(path: str, value):
    pod = copy.deepcopy(COMPLIANT)
    *parents, leaf = path.split(".")
    node = pod["spec"]
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[leaf] = value
    return pod


def test_a_compliant_pod_passes():
    assert restricted_violations(COMPLIANT) == []


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("hostNetwork", True, "spec.hostNetwork"),
        ("volumes", [{"name": "h", "hostPath": {"path": "/"}}], "hostPath volumes are not allowed"),
        ("volumes", [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "volume type ['nfs'] is not allowed"),
        ("securityContext.runAsNonRoot", False, "containers[c].securityContext.runAsNonRoot"),
        ("securityContext.runAsUser", 0, "spec.securityContext.runAsUser: must not be 0"),
        ("securityContext.seccompProfile", {"type": "Unconfined"}, "Unconfined is not allowed"),
        ("containers.0.securityContext.allowPrivilegeEscalation", True, "allowPrivilegeEscalation: must be false"),
        ("containers.0.securityContext.privileged", True, "privileged: must be unset or false"),
        ("containers.0.securityContext.capabilities", {"drop": ["NET_RAW"]}, "capabilities.drop: must include ALL"),
        ("containers.0.securityContext.capabilities", {"drop": ["ALL"], "add": ["SYS_ADMIN"]}, "['SYS_ADMIN'] not allowed"),
        ("containers.0.ports", [{"containerPort": 80, "hostPort": 80}], "hostPort 80 is not allowed"),
    ],
)
def test_each_restricted_rule_is_checked(path, value, expected):
    problems = restricted_violations(_broken(path, value))
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("extra", [
    [],
    ["train.workers=3", "kubernetes.clean_pod_policy=All"],
    ["kubernetes.node_selector={pool: gpu}", "kubernetes.image_pull_secrets=[regcred]",
     "kubernetes.tolerations=[{key: gpu, operator: Exists, effect: NoSchedule}]"],
])
def test_every_pod_the_controllers_create_for_ctpipe_jobs_is_restricted(extra):
    """TrainJob pods pass; of a PyTorchJob's pods only the operator's init-pytorch container fails (it is the
    controller's, not ctpipe's: docs/cluster.md names the namespace setting)."""
    config = load_config(overrides=["kubernetes.namespace=team-b", "kubernetes.worker_gpus=0", *extra])
    trainjob = render_pytorchjob(config, backend="trainjob")
    trainjob["metadata"]["name"] = "ctpipe-train-0123"
    for pod in trainjob_pods(trainjob, torch_distributed_runtime()):
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
    pytorchjob = render_pytorchjob(config, backend="pytorchjob")
    pytorchjob["metadata"]["name"] = "ctpipe-train-0123"
    pods = pytorchjob_pods(pytorchjob)
    assert len(pods) == config.train.workers
    for pod in pods:
        problems = restricted_violations(pod)
        if pod["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "master":
            assert problems == []
        else:
            assert problems and all(p.startswith("initContainers[init-pytorch].") for p in problems), problems
