"""train_model with backend pytorchjob, end to end: the real launcher, the real kubernetes client, a
stand-in API server whose "operator" runs the job's replicas as real gloo processes on this machine."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.k8s_api import FakeKubeAPI, run_job_locally
from kubernetes import client

from components.config import load_config
from components.data.demo import write_demo_data
from components.errors import TrainingError
from components.training.launch import train_model
from components.training.launchers.pytorchjob import PyTorchJobLauncher
from components.training.standalone import build_snapshot

pytestmark = pytest.mark.slow  # two real worker processes per test (~10-25 s on 2 shared cores)

NS = "ctpipe"
TINY = [
    "data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.workers=2",
    "train.max_steps=6", "train.warmup_steps=1", "train.eval_every=3", "train.checkpoint_every=3",
    "train.batch_size=16", "train.keep_best=1", "train.timeout_minutes=2", "train.backend=pytorchjob",
    "kubernetes.worker_gpus=0", f"kubernetes.namespace={NS}",
]


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pj-e2e")
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=3)
    build_snapshot(str(root / "data"), load_config(None, TINY), root / "snapshot")
    return str(root / "snapshot")


def _launcher(config, fake, lines):
    conf = client.Configuration()
    conf.host = fake.url
    return PyTorchJobLauncher(config, api_client=client.ApiClient(conf), emit=lines.append, poll_seconds=0.1,
                              backoff_seconds=0.05, watch_seconds=10)


def test_train_step_runs_the_job_and_reads_back_its_checkpoints(snapshot_dir, tmp_path):
    config = load_config(None, [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    lines: list[str] = []
    with FakeKubeAPI() as fake:
        fake.on_create = run_job_locally
        result = train_model(snapshot_dir, str(tmp_path / "step-checkpoints"), config, tracking_uri=None,
                             mlflow_run_id=None, job_name="1b2c3d4e-aaaa-bbbb-cccc-0123456789ab",
                             launcher=_launcher(config, fake, lines))
        (job,) = fake.jobs.values()
    assert result.steps == 6 and result.world_size == 2 and result.best_step in (3, 6)
    # Checkpoints were written on the shared volume by the pods and copied back into the step's output.
    staged = tmp_path / "pvc" / "jobs" / job["metadata"]["name"] / "1-step-checkpoints"
    assert staged.is_dir() and any(staged.iterdir())
    copied = {p.relative_to(tmp_path / "step-checkpoints") for p in (tmp_path / "step-checkpoints").rglob("*") if p.is_file()}
    assert copied == {p.relative_to(staged) for p in staged.rglob("*") if p.is_file()}
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert any(" master] " in ln for ln in lines), "the Master pod's log is streamed into the step log"


def test_a_crashing_worker_fails_the_step_with_its_log(snapshot_dir, tmp_path):
    config = load_config(None, [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    with FakeKubeAPI() as fake:
        fake.on_create = run_job_locally
        launcher = _launcher(config, fake, [])
        # A snapshot that is not one: the worker exits non-zero and the operator marks the job Failed.
        bad = tmp_path / "not-a-snapshot"
        bad.mkdir()
        with pytest.raises(TrainingError) as err:
            train_model(str(bad), str(tmp_path / "ckpt"), config, tracking_uri=None, mlflow_run_id=None,
                        job_name="run-2", launcher=launcher)
    text = str(err.value)
    assert "PyTorchJobFailed" in text and "master-0" in text
    assert "Traceback" in text or "Error" in text
    assert not Path(tmp_path / "ckpt" / "train_result.json").exists()
