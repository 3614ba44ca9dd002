"""train.backend=auto: the job kind is found through the API server's discovery endpoints, for every
combination of installed CRDs (a stock Kubeflow of 2026 has Trainer v2 only; older platforms the v1 operator)."""

from __future__ import annotations

import functools

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.kube.discovery import NoTrainingBackendError, discover_backends
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.auto import AutoLauncher
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.factory import launcher_for
from tests.fakes.controllers import torch_distributed_runtime
from tests.fakes.k8s_api import PYTORCHJOB_CRDS, TRAINJOB_CRDS, FakeKubeAPI, run_job

NS = "team-b"


def _api(fake: FakeKubeAPI) -> client.ApiClient:
    conf = client.Configuration()
    conf.host = fake.url
    return client.ApiClient(conf)


def _install(fake: FakeKubeAPI, *, trainjob: bool, runtime: bool, pytorchjob: bool) -> None:
    fake.served = {**(TRAINJOB_CRDS if trainjob else {}), **(PYTORCHJOB_CRDS if pytorchjob else {})}
    if runtime:
        fake.cluster_runtimes["torch-distributed"] = torch_distributed_runtime()


@pytest.mark.parametrize(
    ("trainjob", "runtime", "pytorchjob", "chosen"),
    [
        (True, True, True, "trainjob"),  # both: Trainer v2 is preferred
        (True, True, False, "trainjob"),  # a stock Kubeflow of 2026
        (False, False, True, "pytorchjob"),  # Training Operator v1 only
        (True, False, True, "pytorchjob"),  # Trainer v2 without the named runtime cannot run the job
    ],
)
def test_the_installed_crds_choose_the_job_kind(trainjob, runtime, pytorchjob, chosen):
    with FakeKubeAPI() as fake:
        _install(fake, trainjob=trainjob, runtime=runtime, pytorchjob=pytorchjob)
        installed = discover_backends(_api(fake), "torch-distributed")
    assert (installed.trainjob, installed.runtime_found, installed.pytorchjob) == (trainjob, runtime, pytorchjob)
    assert installed.choose() == chosen


@pytest.mark.parametrize(("trainjob", "found"), [(False, "neither CRD is served"),
                                                 (True, "ClusterTrainingRuntime 'torch-distributed' does not exist")])
def test_no_usable_backend_names_both_crds_and_the_runtime(trainjob, found):
    with FakeKubeAPI() as fake:
        _install(fake, trainjob=trainjob, runtime=False, pytorchjob=False)
        installed = discover_backends(_api(fake), "torch-distributed")
    with pytest.raises(NoTrainingBackendError) as err:
        installed.choose()
    message = str(err.value)
    assert found in message
    for named in ("trainjobs.trainer.kubeflow.org", "pytorchjobs.kubeflow.org", "'torch-distributed'",
                  "kubernetes.trainjob_runtime", "train.backend"):
        assert named in message, named
    assert isinstance(err.value, UserError)  # the CLI exits 2 with the message


def test_a_forbidden_runtime_read_names_the_grant():
    with FakeKubeAPI() as fake:
        _install(fake, trainjob=True, runtime=True, pytorchjob=True)
        fake.fail("GET", "/clustertrainingruntimes/torch-distributed", 403)
        with pytest.raises(UserError, match=r"403 Forbidden.*'get' on clustertrainingruntimes.*runtime-reader"):
            discover_backends(_api(fake), "torch-distributed")


def test_backend_auto_is_resolved_when_the_step_runs():
    assert isinstance(launcher_for(load_config(overrides=["train.backend=auto"])), AutoLauncher)


@pytest.mark.parametrize(("trainjob", "kind"), [(True, "TrainJob"), (False, "PyTorchJob")])
def test_the_auto_launcher_submits_the_kind_the_cluster_serves(tmp_path, trainjob, kind):
    config = load_config(overrides=["train.backend=auto", f"kubernetes.namespace={NS}",
                                    f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    launch = WorkerLaunch(job_name="8f0c1a2e-5d1b-4c8e-9a9e-0123456789ab", world_size=2,
                          command=["python", "-m", "ctpipe.components.steps.train.worker"], env={}, deadline_seconds=30)
    lines: list[str] = []
    with FakeKubeAPI() as fake:
        _install(fake, trainjob=trainjob, runtime=trainjob, pytorchjob=True)
        fake.on_create = functools.partial(run_job, trainjob=trainjob)
        AutoLauncher(config, api_client=_api(fake), emit=lines.append, poll_seconds=0.05, backoff_seconds=0.01,
                     grace_seconds=0.0, watch_seconds=5).run(launch)
        (job,) = fake.jobs.values()
    assert job["kind"] == kind
    assert any(f"using {kind.lower()}" in line for line in lines), lines
