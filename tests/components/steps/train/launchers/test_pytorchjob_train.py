"""train_model with backend pytorchjob, end to end: the real launcher, the real kubernetes client, a
stand-in API server whose "operator" runs the job's replicas as real gloo processes on this machine."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from kubernetes import client

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fakes.k8s_api import FakeKubeAPI, run_job_locally

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
    # One whole-job restart, then the step fails with the last attempt's reason and log.
    config = load_config(None, [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}", "kubernetes.backoff_limit=1"])
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
    # The pod that failed first (either rank: both read the bad snapshot) with its log.
    assert "PyTorchJobFailed" in text and ("-master-0" in text or "-worker-0" in text)
    assert "Traceback" in text or "Error" in text
    assert "restarted 1 times" in text and fake.count("POST", "/pytorchjobs") == 2
    assert not Path(tmp_path / "ckpt" / "train_result.json").exists()


def test_a_crashed_rank_restarts_every_rank_together_and_training_resumes(snapshot_dir, tmp_path):
    """Fault injection: rank 1 dies abruptly (exit 17, no cleanup) before step 6, after the checkpoints of steps 2
    and 4 started (a save runs beside the steps after it: step 2's is complete, step 4's may be).

    The stand-in operator applies the job's restart policy as Training Operator v1.9 and the kubelet do. A rank
    must never be restarted alone in place while its peers wait in a collective of the old group (static
    rendezvous: they would block until the process-group timeout); the whole job starts again, every rank
    together, and training resumes from the latest complete checkpoint."""
    config = load_config(None, [*TINY, "train.checkpoint_every=2", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    lines: list[str] = []
    attempts: list[str] = []

    def operator(fake, ns, name):
        attempts.append(name)
        run_job_locally(fake, ns, name, fault="exit@5:1" if len(attempts) == 1 else None)

    with FakeKubeAPI() as fake:
        fake.on_create = operator
        result = train_model(snapshot_dir, str(tmp_path / "step-checkpoints"), config, tracking_uri=None,
                             mlflow_run_id=None, job_name="run-fault", launcher=_launcher(config, fake, lines))
        starts = list(fake.starts)
    assert not [s for s in starts if s[2] > 0], f"a rank was restarted alone, in place: {starts}"
    ranks_per_attempt: dict[str, set[int]] = {}
    for uid, rank, _ in starts:
        ranks_per_attempt.setdefault(uid, set()).add(rank)
    assert list(ranks_per_attempt.values()) == [{0, 1}, {0, 1}], "every attempt starts all ranks"
    assert result.steps == 6 and result.resumed_from_step in (2, 4)
    assert any("restarting all 2 ranks" in ln for ln in lines), lines


def test_a_user_error_is_not_restarted(snapshot_dir, tmp_path):
    """A rank that fails in a way a restart would repeat (a non-finite loss: exit 2) fails the step at once."""
    config = load_config(None, [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    with FakeKubeAPI() as fake:
        fake.on_create = functools.partial(run_job_locally, fault="nan@2")
        with pytest.raises(TrainingError, match="not restarted") as err:
            train_model(snapshot_dir, str(tmp_path / "ckpt"), config, tracking_uri=None, mlflow_run_id=None,
                        job_name="run-nan", launcher=_launcher(config, fake, []))
        assert fake.count("POST", "/pytorchjobs") == 1
    assert "non-finite" in str(err.value)
