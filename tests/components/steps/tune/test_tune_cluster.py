"""A retried tune step on a cluster re-attaches to what its first attempt submitted, on the stand-in API server:
the first attempt (a process, as the step's pod) is killed once its search was submitted, the second finds it and
waits for it instead of submitting again. Once through Katib (one Experiment, trials as TrainJobs) and once with
each trial the train step's TrainJob through its launcher. The trials' pods run here as real processes with the
env the stand-in controllers give them (tests/fakes/controllers.py, tests/fakes/katib.py)."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.tune import katib as katib_engine
from ctpipe.components.steps.tune.tune import tune_hyperparameters
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fakes.controllers import controller, torch_distributed_runtime
from tests.fakes.k8s_api import FakeKubeAPI
from tests.fakes.katib import FakeKatib

pytestmark = pytest.mark.slow  # real trials: a torchrun and a worker process each

NS = "ctpipe"
RUN_ID = "0123456789abcdef0123456789abcdef"
TINY = ["data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.workers=1",
        "train.max_steps=20", "train.warmup_steps=2", "train.eval_every=3", "train.batch_size=16", "train.timeout_minutes=2",
        "train.backend=trainjob", f"kubernetes.namespace={NS}", "kubernetes.shared_pvc=ctpipe-shared",
        "kubernetes.worker_gpus=0", "tune.trials=2", "tune.trial_steps=3", "tune.parallel_trials=2",
        'tune.space={train.lr: "log_uniform(1e-3, 1e-2)"}',
        # The gate's checks are test_tune_local's and the sanity tests': this 16-wide model at these rates memorises
        # a batch in the gate's 300 steps only just (overfit loss 0.07-0.15 against 0.05), and re-attach is the point.
        "sanity.enabled=false"]
ATTEMPT = """
import json, sys
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.tune.tune import tune_hyperparameters
settings, snapshot, work = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
tune_hyperparameters(snapshot, work, load_config(None, settings), tracking_uri=None, mlflow_run_id=None,
                     job_name=sys.argv[4])
"""


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tune-cluster")
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=3)
    build_snapshot(str(root / "data"), load_config(None, TINY), root / "snapshot")
    return str(root / "snapshot")


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """The stand-in API server with Trainer's runtime, reached through a kubeconfig as the step's pod would."""
    with FakeKubeAPI() as fake:
        fake.cluster_runtimes["torch-distributed"] = torch_distributed_runtime()
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": fake.url}}],
            "users": [{"name": "fake", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": NS}}]}))
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # for the processes started here
        from kubernetes.config import kube_config

        monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))  # read at import: this one
        monkeypatch.setattr(katib_engine, "POLL_SECONDS", 0.2)
        yield fake


def first_attempt_dies(settings, snapshot_dir, work, submitted, timeout=120.0):
    """Run a first attempt of the step as its own process group and SIGKILL it (a lost pod) once ``submitted()``."""
    proc = subprocess.Popen([sys.executable, "-c", ATTEMPT, json.dumps(settings), snapshot_dir, str(work), RUN_ID],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    end = time.monotonic() + timeout
    while not submitted():
        assert proc.poll() is None, f"the first attempt ended (exit {proc.returncode}) before it submitted its search"
        assert time.monotonic() < end, "the first attempt submitted nothing"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_retried_step_re_attaches_to_its_katib_experiment(cluster, snapshot_dir, tmp_path, capsys):
    fake = cluster
    stand_in = FakeKatib(fake)
    settings = [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}", "tune.engine=katib", "tune.baseline_trial=false"]
    first_attempt_dies(settings, snapshot_dir, tmp_path / "attempt-1", lambda: stand_in.created)
    result = tune_hyperparameters(snapshot_dir, str(tmp_path / "attempt-2"), load_config(None, settings),
                                  tracking_uri=None, mlflow_run_id=None, job_name=RUN_ID)
    name = katib_engine.experiment_name(RUN_ID)
    assert stand_in.created == [name]  # one Experiment: the retried step followed the first attempt's
    assert fake.count("POST", "/experiments") == 1 and f"re-attaching to existing Experiment {NS}/{name}" in capsys.readouterr().out
    assert [o.status for o in result.outcomes] == ["succeeded", "succeeded"]
    assert [o.gate for o in result.outcomes] == ["skipped", "skipped"]  # Katib's trials gated once drawn (gate off)
    trial_jobs = {n: j for (_, n), j in fake.jobs.items() if j["kind"] == "TrainJob"}
    assert set(trial_jobs) == {o.job_name for o in result.outcomes}
    for outcome in result.outcomes:
        assert 1e-3 <= outcome.values["train.lr"] <= 1e-2 and outcome.steps == 3 and outcome.objective is not None
        env = {e["name"]: e.get("value") for e in trial_jobs[outcome.job_name]["spec"]["trainer"]["env"]}
        assert float(env["KUBEFLOW_TRAINER_OPT_TRAIN_LR"]) == outcome.values["train.lr"]
        assert not (tmp_path / "pvc" / "tune" / name / outcome.job_name / "checkpoints").exists()
    assert result.config.train.lr == result.chosen.values["train.lr"]


def test_a_retried_step_re_attaches_to_its_trials_trainjobs(cluster, snapshot_dir, tmp_path):
    fake = cluster
    fake.on_create = functools.partial(controller)
    settings = [*TINY, f"kubernetes.shared_mount_path={tmp_path / 'pvc'}", "tune.engine=jobs"]
    first_attempt_dies(settings, snapshot_dir, tmp_path / "attempt-1", lambda: fake.count("POST", "/trainjobs") >= 2)
    result = tune_hyperparameters(snapshot_dir, str(tmp_path / "attempt-2"), load_config(None, settings),
                                  tracking_uri=None, mlflow_run_id=None, job_name=RUN_ID)
    assert fake.count("POST", "/trainjobs") == 2  # each trial's job created once, by the first attempt
    assert [(o.baseline, o.status) for o in result.outcomes] == [(True, "succeeded"), (False, "succeeded")]
    for index in (0, 1):
        log = (tmp_path / "attempt-2" / f"trial-{index:03d}" / "trial.log").read_text()
        assert "re-attaching to existing TrainJob" in log
