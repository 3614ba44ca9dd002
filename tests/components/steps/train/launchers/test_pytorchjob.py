"""The PyTorchJob launcher against a stand-in API server, driven through the real `kubernetes` client."""

from __future__ import annotations

import functools
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.kube.names import job_name_for
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.pytorchjob import PyTorchJobLauncher
from tests.fakes.k8s_api import FakeKubeAPI, run_job

NS = "team-a"


@pytest.fixture
def fake():
    with FakeKubeAPI() as api:
        yield api


def _launcher(fake: FakeKubeAPI, lines: list[str], tmp_path: Path, **kw) -> PyTorchJobLauncher:
    config = load_config(overrides=[f"kubernetes.namespace={NS}", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    conf = client.Configuration()
    conf.host = fake.url
    kw = {"poll_seconds": 0.05, "backoff_seconds": 0.01, "grace_seconds": 0.0, "watch_seconds": 5, **kw}
    return PyTorchJobLauncher(config, api_client=client.ApiClient(conf), emit=lines.append, **kw)


def _launch(tmp_path: Path, deadline: int = 30, world_size: int = 2) -> WorkerLaunch:
    snapshot = tmp_path / "step" / "snapshot"
    snapshot.mkdir(parents=True, exist_ok=True)
    (snapshot / "train.parquet").write_bytes(b"rows")
    checkpoints = tmp_path / "step" / "checkpoints"
    checkpoints.mkdir(parents=True, exist_ok=True)
    command = ["/opt/venv/bin/python", "-m", "ctpipe.components.steps.train.worker",
               "--snapshot", str(snapshot), f"--checkpoint-dir={checkpoints}"]
    return WorkerLaunch(job_name=job_name_for("8f0c1a2e-run", "train"), world_size=world_size, command=command,
                        env={"MLFLOW_RUN_ID": "abc"}, deadline_seconds=deadline)


def test_success_streams_master_log_and_copies_checkpoints_back(fake, tmp_path):
    def write_checkpoint(job):
        # What the worker does on the shared volume: its command names the mapped checkpoint dir.
        argv = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
        ckpt = Path(next(a for a in argv if a.startswith("--checkpoint-dir=")).split("=", 1)[1])
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "index.json").write_text('{"best": 10}')

    fake.on_create = functools.partial(run_job, lines=("step 10 loss 1.2", "step 20 loss 0.9", "done"),
                                       on_success=write_checkpoint)
    fake.drop_log_streams = 1  # the first log stream breaks after one line: reconnect without repeats
    lines: list[str] = []
    launch = _launch(tmp_path)
    _launcher(fake, lines, tmp_path).run(launch)

    assert fake.count("POST", "/pytorchjobs") == 1
    master = [ln.split("] ", 1)[1] for ln in lines if " master] " in ln]
    assert master == ["step 10 loss 1.2", "step 20 loss 0.9", "done"]
    assert (tmp_path / "step" / "checkpoints" / "index.json").read_text() == '{"best": 10}'
    job = next(iter(fake.jobs.values()))
    argv = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
    assert argv[:3] == ["python", "-m", "ctpipe.components.steps.train.worker"]
    assert all(str(tmp_path / "pvc") in a for a in argv[3:] if "/" in a), argv
    assert (tmp_path / "pvc" / "jobs" / job["metadata"]["name"] / "0-snapshot" / "train.parquet").exists()
    assert job["spec"]["runPolicy"]["activeDeadlineSeconds"] == 30
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


def test_failure_reports_reason_and_failing_pod_log(fake, tmp_path):
    fake.on_create = functools.partial(
        run_job, outcome="Failed", reason="PyTorchJobFailed", message="PyTorchJob ctpipe is failed because 1 Master replica(s) failed.",
        lines=("step 1 loss nan", "Traceback (most recent call last):", "TrainingError: loss is NaN at step 1"),
    )
    lines: list[str] = []
    with pytest.raises(TrainingError) as err:
        _launcher(fake, lines, tmp_path).run(_launch(tmp_path))
    text = str(err.value)
    assert "PyTorchJobFailed" in text and "1 Master replica(s) failed" in text
    assert "master-0" in text and "TrainingError: loss is NaN at step 1" in text
    assert not (tmp_path / "step" / "checkpoints" / "index.json").exists()


def test_clean_pod_policy_all_keeps_the_failed_pod_until_the_launcher_has_read_it(fake, tmp_path):
    """The operator's All deletes the failed pod when the job ends: read too late, an exit-2 failure would be
    restarted and reported without its log. The launcher submits Running, reads the pod, then deletes the job."""
    fake.on_create = functools.partial(run_job, outcome="Failed", exit_code=2,
                                       lines=("step 3 loss nan", "TrainingError: loss is not finite at step 3"))
    config = load_config(overrides=[f"kubernetes.namespace={NS}", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}",
                                    "kubernetes.clean_pod_policy=All"])
    conf = client.Configuration()
    conf.host = fake.url
    launcher = PyTorchJobLauncher(config, api_client=client.ApiClient(conf), emit=[].append, poll_seconds=0.05,
                                  backoff_seconds=0.01, grace_seconds=0.0, watch_seconds=5)
    with pytest.raises(TrainingError, match="not restarted") as err:
        launcher.run(_launch(tmp_path))
    assert "loss is not finite at step 3" in str(err.value)
    assert fake.count("POST", "/pytorchjobs") == 1
    assert fake.count("DELETE", "/pytorchjobs/") == 1 and not fake.jobs  # cleaned up once read


def test_retried_step_reattaches_without_second_create(fake, tmp_path):
    launch = _launch(tmp_path)
    launcher = _launcher(fake, [], tmp_path)
    job, _ = launcher.plan(launch)
    fake.put_job(job)  # the first attempt's job, still running
    name = job["metadata"]["name"]
    threading.Thread(target=run_job, args=(fake, NS, name), kwargs={"lines": ("resumed",)}, daemon=True).start()
    lines: list[str] = []
    _launcher(fake, lines, tmp_path).run(launch)
    assert fake.count("POST") == 0
    assert any("re-attaching" in ln for ln in lines)


def test_failed_job_from_earlier_attempt_is_replaced(fake, tmp_path):
    launch = _launch(tmp_path)
    launcher = _launcher(fake, [], tmp_path)
    job, _ = launcher.plan(launch)
    fake.put_job(job)
    fake.set_condition(NS, job["metadata"]["name"], "Failed", "PyTorchJobFailed", "earlier attempt")
    fake.on_create = run_job
    launcher.run(launch)
    assert fake.count("DELETE") == 1 and fake.count("POST") == 1


def test_timeout_deletes_the_job(fake, tmp_path):
    fake.on_create = lambda f, ns, name: f.set_condition(ns, name, "Running")  # never finishes
    started = time.monotonic()
    with pytest.raises(TrainingError, match="did not finish within its deadline of 1s"):
        _launcher(fake, [], tmp_path, grace_seconds=0.5).run(_launch(tmp_path, deadline=1))
    assert time.monotonic() - started < 10
    assert fake.count("DELETE", "/pytorchjobs/") == 1 and not fake.jobs


def test_sigterm_deletes_the_job_and_restores_the_handler(fake, tmp_path):
    def running_then_cancel(f, ns, name):
        f.set_condition(ns, name, "Running")
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)  # what KFP does to the step's pod on cancel

    fake.on_create = running_then_cancel
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingError, match="cancelled and deleted"):
        _launcher(fake, [], tmp_path).run(_launch(tmp_path))
    assert fake.count("DELETE", "/pytorchjobs/") == 1 and not fake.jobs
    assert signal.getsignal(signal.SIGTERM) is before


def test_transient_errors_are_retried(fake, tmp_path):
    fake.fail("GET", "/pytorchjobs/", 503, times=2)
    fake.fail("POST", "/pytorchjobs", 500, times=2)
    fake.fail("POST", "/pytorchjobs", 429, times=1)
    fake.fail("GET", "watch=true", 500, times=1)
    fake.on_create = run_job
    lines: list[str] = []
    _launcher(fake, lines, tmp_path).run(_launch(tmp_path))
    assert len(fake.jobs) == 1
    assert sum("transient Kubernetes API error" in ln for ln in lines) == 5
    assert any("watch on PyTorchJob" in ln for ln in lines)


def test_watch_unavailable_falls_back_to_polling(fake, tmp_path):
    fake.fail("GET", "watch=true", 500, times=100)
    fake.on_create = run_job
    lines: list[str] = []
    _launcher(fake, lines, tmp_path).run(_launch(tmp_path))
    assert any("polling" in ln for ln in lines)
    assert any(ln.endswith(": Succeeded") for ln in lines)


def test_permanent_error_is_not_retried(fake, tmp_path):
    fake.fail("POST", "/pytorchjobs", 403, times=1)
    with pytest.raises(client.exceptions.ApiException) as err:
        _launcher(fake, [], tmp_path).run(_launch(tmp_path))
    assert err.value.status == 403 and fake.count("POST") == 1


def test_a_pod_that_cannot_start_is_explained_in_the_log(fake, tmp_path):
    def image_pull_error_then_timeout(f, ns, name):
        f.set_condition(ns, name, "Created")
        pod = f.add_pod(ns, name, "master", 0, phase="Pending")
        f.wait_pod(ns, pod, "ErrImagePull", 'failed to pull image "ghcr.io/ctpipe/ctpipe-trainer:typo"')

    fake.on_create = image_pull_error_then_timeout
    lines: list[str] = []
    with pytest.raises(TrainingError, match="deadline"):
        _launcher(fake, lines, tmp_path, grace_seconds=0.0).run(_launch(tmp_path, deadline=2))
    explained = [ln for ln in lines if "is not running yet" in ln]
    assert any("ErrImagePull" in ln for ln in explained) and any("Failed: failed to pull image" in ln for ln in explained)
    assert len(explained) == len(set(explained)), "each reason is said once"


def test_dropped_and_expired_watches_resume(fake, tmp_path):
    fake.drop_watches = 2
    fake.expire_watches = 1
    fake.on_create = functools.partial(run_job, delay=0.3)
    lines: list[str] = []
    _launcher(fake, lines, tmp_path).run(_launch(tmp_path))
    assert sum("dropped" in ln for ln in lines) == 2, lines
    watches = [p for m, p in fake.requests if m == "GET" and "watch=" in p]
    assert any("resourceVersion=" in p for p in watches), "a dropped watch resumes from the last resourceVersion"
    assert len(watches) >= 4  # two drops, one 410 Gone (re-listed from now), then a watch that completes
    assert any(ln.endswith(": Succeeded") for ln in lines) and fake.count("POST") == 1


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob"])
def test_without_a_shared_pvc_a_step_local_path_is_refused_before_any_job(fake, tmp_path, backend):
    """With kubernetes.shared_pvc unset the worker pods mount no volume but /dev/shm and /tmp: the step's own
    artifact paths (KFP: /minio/..., /gcs/..., /s3/...) do not exist there. Refuse before creating a job that
    can only fail (and be restarted kubernetes.backoff_limit times), naming the setting."""
    from ctpipe.components.lib.kube.pod import JobValidationError
    from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for

    config = load_config(overrides=[f"kubernetes.namespace={NS}", "kubernetes.shared_pvc=null", f"train.backend={backend}"])
    conf = client.Configuration()
    conf.host = fake.url
    launcher = kubeflow_launcher_for(config, api_client=client.ApiClient(conf), namespace=NS)
    with pytest.raises(JobValidationError, match="kubernetes.shared_pvc") as err:
        launcher.run(_launch(tmp_path))
    assert str(tmp_path / "step" / "snapshot") in str(err.value)
    assert fake.count("POST") == 0 and not fake.jobs


def test_without_a_shared_pvc_fsspec_urls_still_reach_the_pods(tmp_path):
    from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for

    config = load_config(overrides=[f"kubernetes.namespace={NS}", "kubernetes.shared_pvc=null"])
    launch = WorkerLaunch(job_name="ctpipe-train-url", world_size=2, deadline_seconds=30, env={},
                          command=["python", "-m", "ctpipe.components.steps.train.worker", "--snapshot", "s3://bucket/snap",
                                   "--checkpoints", "s3://bucket/ckpt"])
    job, staging = kubeflow_launcher_for(config, api_client=None, namespace=NS).plan(launch)
    assert staging.mapping == {}
    assert job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"][-1] == "s3://bucket/ckpt"
