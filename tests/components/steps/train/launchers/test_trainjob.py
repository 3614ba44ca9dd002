"""The Trainer v2 TrainJob backend (train.backend=trainjob): building, strict validation against the
v2.3 CRD, and the launcher against the stand-in API server through the real kubernetes client."""

from __future__ import annotations

import functools
import json
import os
import signal
import time

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import ConfigError, TrainingError
from ctpipe.components.lib.kube.trainjob import (
    JobValidationError,
    build_trainjob,
    torchrun_command,
    validate_trainjob,
)
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.factory import launcher_for
from ctpipe.components.steps.train.launchers.trainjob import TrainJobLauncher
from tests.fakes.k8s_api import FakeKubeAPI, run_job

NS = "team-b"
LAUNCH = WorkerLaunch(job_name="8f0c1a2e-5d1b-4c8e-9a9e-0123456789ab", world_size=3,
                      command=["python", "-m", "ctpipe.components.steps.train.worker", "--snapshot", "/mnt/ctpipe/s"],
                      env={"OMP_NUM_THREADS": "1"}, deadline_seconds=30)


def _config(*extra: str, tmp_path=None):
    mount = [f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"] if tmp_path else []
    return load_config(overrides=["train.backend=trainjob", f"kubernetes.namespace={NS}", *mount, *extra])


def _launcher(fake, lines, tmp_path, **kw):
    conf = client.Configuration()
    conf.host = fake.url
    kw = {"poll_seconds": 0.05, "backoff_seconds": 0.01, "grace_seconds": 0.0, "watch_seconds": 5, **kw}
    return TrainJobLauncher(_config(tmp_path=tmp_path), api_client=client.ApiClient(conf), emit=lines.append, **kw)


def test_trainjob_is_built_and_validates_strictly():
    job = build_trainjob(_config("kubernetes.node_selector={pool: gpu}").kubernetes, LAUNCH)
    validate_trainjob(job)
    spec = job["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed" and spec["activeDeadlineSeconds"] == 30
    assert spec["trainer"]["numNodes"] == 3 and spec["trainer"]["numProcPerNode"] == 1
    assert spec["trainer"]["command"][:3] == ["torchrun", "--module", "ctpipe.components.steps.train.worker"]
    pod = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu"} and pod["containers"][0]["name"] == "node"
    assert pod["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda j: j["spec"].__setitem__("backoffLimit", 3), "spec.backoffLimit: unknown field"),
        (lambda j: j["spec"]["trainer"].__setitem__("replicas", 2), "spec.trainer.replicas: unknown field"),
        (lambda j: j["spec"]["trainer"].__setitem__("numNodes", "2"), "spec.trainer.numNodes: expected integer"),
        (lambda j: j["spec"].__setitem__("activeDeadlineSeconds", 0), "activeDeadlineSeconds: 0 is out of range"),
        (lambda j: j["spec"].pop("runtimeRef"), "spec.runtimeRef: required field is missing"),
        (lambda j: j["metadata"].__setitem__("name", "Bad.Name"), "not a DNS-1035 label"),
        (lambda j: j["spec"]["trainer"].__setitem__("image", ""), "spec.trainer.image"),
    ],
)
def test_bad_trainjobs_are_refused(mutate, expected):
    job = build_trainjob(_config().kubernetes, LAUNCH)
    mutate(job)
    with pytest.raises(JobValidationError, match="invalid and was not submitted") as err:
        validate_trainjob(job)
    assert expected in str(err.value)


def test_trainjob_needs_a_python_module_command():
    assert torchrun_command(["/opt/venv/bin/python3", "-m", "m", "--x"]) == ["torchrun", "--module", "m", "--x"]
    with pytest.raises(ConfigError, match="python -m MODULE"):
        torchrun_command(["bash", "-c", "train"])


def test_backend_trainjob_selects_the_trainjob_launcher():
    assert isinstance(launcher_for(_config()), TrainJobLauncher)


def test_trainjob_success_streams_node0_log(tmp_path):
    lines: list[str] = []
    with FakeKubeAPI() as fake:
        fake.on_create = functools.partial(run_job, trainjob=True, lines=("epoch 1", "done"))
        _launcher(fake, lines, tmp_path).run(LAUNCH)
        (job,) = fake.jobs.values()
        assert fake.count("POST", "/trainjobs") == 1
    assert job["kind"] == "TrainJob"
    assert [ln.split("] ", 1)[1] for ln in lines if " master] " in ln] == ["epoch 1", "done"]
    assert any(ln.endswith(": Succeeded") for ln in lines)


def test_trainjob_failure_reports_reason_and_node_log(tmp_path):
    with FakeKubeAPI() as fake:
        fake.on_create = functools.partial(run_job, trainjob=True, outcome="Failed", reason="DeadlineExceeded",
                                           message="TrainJob exceeded its deadline", lines=("ValueError: bad batch",))
        with pytest.raises(TrainingError) as err:
            _launcher(fake, [], tmp_path).run(LAUNCH)
    text = str(err.value)
    assert "TrainJob team-b/" in text and "DeadlineExceeded" in text and "ValueError: bad batch" in text
    assert "-node-0-0-" in text


def test_trainjob_is_deleted_on_sigterm(tmp_path):
    def created_then_cancel(f, ns, name):
        f.set_condition(ns, name, "Created")
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)

    with FakeKubeAPI() as fake:
        fake.on_create = created_then_cancel
        with pytest.raises(TrainingError, match="cancelled and deleted"):
            _launcher(fake, [], tmp_path).run(LAUNCH)
        assert fake.count("DELETE", "/trainjobs/") == 1 and not fake.jobs


def _as_failing_worker(fake, ns, name, *, error: dict | None):
    """A node whose worker failed: ``error`` (a permanent failure) is written where the job's env says, as the
    worker does; under torchrun the pod's exit code is 1 either way."""
    if error is not None:
        (env,) = [e["value"] for e in fake.jobs[(ns, name)]["spec"]["trainer"]["env"]
                  if e["name"] == "CTPIPE_PERMANENT_FAILURE_FILE"]
        os.makedirs(os.path.dirname(env), exist_ok=True)
        with open(env, "w") as f:
            json.dump(error, f)
    run_job(fake, ns, name, trainjob=True, outcome="Failed", exit_code=1, lines=("torchrun: worker failed",))


def test_trainjob_a_permanent_failure_is_not_restarted_though_torchrun_exits_1(tmp_path):
    error = {"rank": 1, "type": "ConfigError", "message": "data.key 'id' is not a column", "time": 0.0}
    with FakeKubeAPI() as fake:
        fake.on_create = functools.partial(_as_failing_worker, error=error)
        with pytest.raises(TrainingError, match="not restarted") as err:
            _launcher(fake, [], tmp_path).run(LAUNCH)
        assert fake.count("POST", "/trainjobs") == 1
    assert "rank 1: ConfigError: data.key 'id' is not a column" in str(err.value)


def test_trainjob_a_marker_left_by_an_earlier_attempt_does_not_stop_a_restart(tmp_path):
    attempts = []

    def fail_once_then_succeed(fake, ns, name):
        attempts.append(name)
        if len(attempts) == 1:
            _as_failing_worker(fake, ns, name, error=None)  # a crash a restart may fix
        else:
            run_job(fake, ns, name, trainjob=True)

    stale = tmp_path / "pvc" / "jobs"
    with FakeKubeAPI() as fake:
        fake.on_create = fail_once_then_succeed
        launcher = _launcher(fake, [], tmp_path)
        marker = stale / launcher.plan(LAUNCH)[0]["metadata"]["name"] / "permanent_failure.json"
        marker.parent.mkdir(parents=True)
        marker.write_text(json.dumps({"rank": 0, "type": "ConfigError", "message": "old", "time": 0.0}))
        launcher.run(LAUNCH)
        assert fake.count("POST", "/trainjobs") == 2
    assert not marker.exists()


def test_a_worker_failing_for_good_writes_the_permanent_failure_file(tmp_path, monkeypatch):
    from ctpipe.components.steps.train import worker

    marker = tmp_path / "jobs" / "j" / "permanent_failure.json"
    monkeypatch.setenv("CTPIPE_PERMANENT_FAILURE_FILE", str(marker))
    monkeypatch.delenv("CTPIPE_ERROR_FILE", raising=False)
    monkeypatch.setenv("RANK", "1")
    code = worker.main(["--snapshot", str(tmp_path), "--checkpoints", str(tmp_path / "ckpt"),
                        "--config-json", '{"trian": {}}'])
    assert code == 2
    info = json.loads(marker.read_text())
    assert info["rank"] == 1 and info["type"] == "ConfigError" and "trian" in info["message"]
