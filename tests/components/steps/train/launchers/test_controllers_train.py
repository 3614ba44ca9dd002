"""The env contract, end to end: the stand-in controllers (written from Trainer v2.3's torch plugin and JobSet,
and the Training Operator v1.9's PyTorchJob controller) create the pods, each pod's main container runs here
as a real process with exactly the env the controller put on it (service names -> 127.0.0.1), and the FSDP2
ranks rendezvous and train to the end. Every pod they create is checked against Pod Security "restricted"."""

from __future__ import annotations

import functools

import pytest
from kubernetes import client

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.kube.pod_security import restricted_violations
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fakes.controllers import controller, torch_distributed_runtime
from tests.fakes.k8s_api import FakeKubeAPI

pytestmark = pytest.mark.slow  # two real worker processes per test (~10-25 s on 2 shared cores)

NS = "ctpipe"
TINY = [
    "data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.workers=2",
    "train.max_steps=6", "train.warmup_steps=1", "train.eval_every=3", "train.checkpoint_every=3",
    "train.batch_size=16", "train.keep_best=1", "train.timeout_minutes=2", "train.strategy=fsdp",
    "kubernetes.worker_gpus=0", f"kubernetes.namespace={NS}",
]
RUN_ID = "1b2c3d4e-aaaa-bbbb-cccc-0123456789ab"


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("controllers-e2e")
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=3)
    build_snapshot(str(root / "data"), load_config(None, TINY), root / "snapshot")
    return str(root / "snapshot")


def _train(backend: str, snapshot_dir: str, tmp_path) -> tuple[object, list, list[str]]:
    config = load_config(None, [*TINY, f"train.backend={backend}", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    conf = client.Configuration()
    conf.host = ""
    records: list = []
    lines: list[str] = []
    with FakeKubeAPI() as fake:
        fake.cluster_runtimes["torch-distributed"] = torch_distributed_runtime()
        fake.on_create = functools.partial(controller, record=records)
        conf.host = fake.url
        launcher = kubeflow_launcher_for(config, api_client=client.ApiClient(conf), emit=lines.append,
                                         poll_seconds=0.1, backoff_seconds=0.05, watch_seconds=10)
        result = train_model(snapshot_dir, str(tmp_path / "step-checkpoints"), config, tracking_uri=None,
                             mlflow_run_id=None, job_name=RUN_ID, launcher=launcher)
    return result, records, lines


def test_trainjob_pods_with_the_torch_runtime_env_train_to_the_end(snapshot_dir, tmp_path):
    result, records, lines = _train("trainjob", snapshot_dir, tmp_path)
    assert result.steps == 6 and result.world_size == 2
    ((kind, pods, envs),) = records
    assert kind == "TrainJob" and len(pods) == 2
    name = pods[0]["metadata"]["labels"]["jobset.sigs.k8s.io/jobset-name"]
    for index, (pod, env) in enumerate(zip(pods, envs, strict=True)):
        (node,) = pod["spec"]["containers"]
        assert node["command"][:3] == ["torchrun", "--module", "ctpipe.components.steps.train.worker"]
        on_pod = {e["name"]: e.get("value") for e in node["env"]}
        # What the torch plugin put on the pod, and what the process got (only the service address mapped).
        assert on_pod["PET_MASTER_ADDR"] == f"{name}-node-0-0.{name}" and on_pod["PET_MASTER_PORT"] == "29500"
        assert env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "1" and env["PET_NODE_RANK"] == str(index)
        assert env["PET_MASTER_ADDR"] == "127.0.0.1"
        assert "RANK" not in env and "WORLD_SIZE" not in env  # torchrun derives them from PET_*
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
    assert any(" master] " in ln and "step" in ln for ln in lines), "node 0's log is streamed into the step log"
    # No Running condition on a TrainJob: the step log shows the pods' progress as JobSet reports it.
    assert any("TrainJob" in ln and "(node: 2 active, 2 ready, 0 succeeded, 0 failed)" in ln for ln in lines), lines
    assert any("Succeeded (node: 0 active, 0 ready, 2 succeeded, 0 failed)" in ln for ln in lines), lines


def test_pytorchjob_pods_with_the_operator_env_train_to_the_end(snapshot_dir, tmp_path):
    result, records, _ = _train("pytorchjob", snapshot_dir, tmp_path)
    assert result.steps == 6 and result.world_size == 2
    ((kind, pods, envs),) = records
    assert kind == "PyTorchJob" and [p["metadata"]["name"].rsplit("-", 2)[1] for p in pods] == ["master", "worker"]
    for rank, (pod, env) in enumerate(zip(pods, envs, strict=True)):
        assert env["RANK"] == env["PET_NODE_RANK"] == str(rank) and env["WORLD_SIZE"] == env["PET_NNODES"] == "2"
        assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "127.0.0.1"
        on_pod = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        name = pod["metadata"]["labels"]["training.kubeflow.org/job-name"]
        assert on_pod["MASTER_ADDR"] == f"{name}-master-0" and on_pod["MASTER_PORT"] == "23456"
    master, worker = pods
    assert restricted_violations(master) == []
    # The operator's init-pytorch container (alpine, no security context) is the only thing that fails
    # "restricted": docs/cluster.md says which namespace setting the platform needs.
    problems = restricted_violations(worker)
    assert problems and all(p.startswith("initContainers[init-pytorch]") for p in problems), problems
    assert any("allowPrivilegeEscalation" in p for p in problems)


STEP = """
import sys
from kubernetes import client
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for
host, snapshot, out, run_id, *overrides = sys.argv[1:]
config = load_config(None, overrides)
conf = client.Configuration()
conf.host = host
launcher = kubeflow_launcher_for(config, api_client=client.ApiClient(conf), poll_seconds=0.1, backoff_seconds=0.05,
                                 watch_seconds=10)
train_model(snapshot, out, config, tracking_uri=None, mlflow_run_id=None, job_name=run_id, launcher=launcher)
"""


def test_a_killed_step_pod_is_replaced_by_one_that_follows_the_same_trainjob_to_the_end(snapshot_dir, tmp_path):
    """The step pod dies (SIGKILL: no clean-up) while its TrainJob's ranks train; the restarted step finds that job
    by name and labels, creates no second one, and returns the result the still-running ranks write."""
    import subprocess
    import sys
    import time

    overrides = [*TINY, "train.backend=trainjob", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"]
    config = load_config(None, overrides)
    records: list = []
    lines: list[str] = []
    with FakeKubeAPI() as fake:
        fake.cluster_runtimes["torch-distributed"] = torch_distributed_runtime()
        fake.on_create = functools.partial(controller, record=records)
        first = subprocess.Popen([sys.executable, "-c", STEP, fake.url, snapshot_dir, str(tmp_path / "pod-1" / "checkpoints"), RUN_ID,
                                  *overrides], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 120
        while not any(p["status"]["phase"] == "Running" for p in list(fake.pods.values())):
            assert time.monotonic() < end and first.poll() is None, "the first step pod never got its ranks running"
            time.sleep(0.1)
        first.kill()
        first.wait()
        conf = client.Configuration()
        conf.host = fake.url
        launcher = kubeflow_launcher_for(config, api_client=client.ApiClient(conf), emit=lines.append,
                                         poll_seconds=0.1, backoff_seconds=0.05, watch_seconds=10)
        # A new pod: the step's output path may lie elsewhere, its name (the KFP output's) is the same.
        result = train_model(snapshot_dir, str(tmp_path / "pod-2" / "checkpoints"), config, tracking_uri=None, mlflow_run_id=None,
                             job_name=RUN_ID, launcher=launcher)
        posts = fake.count("POST", "/trainjobs")
    assert posts == 1 and len(records) == 1, "one TrainJob, created by the first step pod only"
    assert result.steps == 6 and result.world_size == 2
    assert any("re-attaching" in ln and "attempt 1 of 4" in ln for ln in lines), lines


def test_a_failed_trainjob_is_recreated_as_attempt_2_and_its_ranks_resume_from_the_checkpoint(snapshot_dir, tmp_path):
    """Rank 1 dies before step 6 (step 2's checkpoint complete, step 4's started) under torchrun: JobSet fails the
    job, the launcher deletes it and creates attempt 2, whose fresh pods resume from the latest complete checkpoint
    on the shared volume and finish."""
    config = load_config(None, [*TINY, "train.backend=trainjob", "train.checkpoint_every=2",
                                f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    records: list = []
    lines: list[str] = []
    attempts: list[str] = []

    def trainer_v2(fake, ns, name):
        attempts.append(fake.jobs[(ns, name)]["metadata"]["annotations"]["ctpipe.io/attempt"])
        controller(fake, ns, name, record=records, fault="exit@5:1" if len(attempts) == 1 else None)

    with FakeKubeAPI() as fake:
        fake.cluster_runtimes["torch-distributed"] = torch_distributed_runtime()
        fake.on_create = trainer_v2
        conf = client.Configuration()
        conf.host = fake.url
        launcher = kubeflow_launcher_for(config, api_client=client.ApiClient(conf), emit=lines.append,
                                         poll_seconds=0.1, backoff_seconds=0.05, watch_seconds=10)
        result = train_model(snapshot_dir, str(tmp_path / "checkpoints"), config, tracking_uri=None,
                             mlflow_run_id=None, job_name=RUN_ID, launcher=launcher)
    assert attempts == ["1", "2"]
    assert result.steps == 6 and result.resumed_from_step in (2, 4)
    assert any("FailedJobs" in ln for ln in lines), "the JobSet's failure reason reaches the step log"
    assert any("created" in ln and "attempt 2 of 4" in ln for ln in lines), lines
