"""Re-attach, not re-create: a train step retried by KFP, or a step pod restarted, finds the job it created (by
name and labels) and follows it; a job that ended in failure is re-created at most kubernetes.backoff_limit
times in all (the count lives on the job, so it survives the step pod), and the step says which attempt it is."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.factory import kubeflow_launcher_for
from ctpipe.components.steps.train.launchers.kubeflow import ATTEMPT_ANNOTATION
from tests.fakes.k8s_api import FakeKubeAPI, run_job

NS = "team-a"
BACKENDS = ["pytorchjob", "trainjob"]


@pytest.fixture
def fake():
    with FakeKubeAPI() as api:
        yield api


def _launcher(fake: FakeKubeAPI, backend: str, lines: list[str], tmp_path: Path):
    config = load_config(overrides=[f"train.backend={backend}", f"kubernetes.namespace={NS}",
                                    "kubernetes.backoff_limit=2", f"kubernetes.shared_mount_path={tmp_path / 'pvc'}"])
    conf = client.Configuration()
    conf.host = fake.url
    return kubeflow_launcher_for(config, api_client=client.ApiClient(conf), emit=lines.append, poll_seconds=0.05,
                                 backoff_seconds=0.01, grace_seconds=0.0, watch_seconds=5)


def _launch() -> WorkerLaunch:
    return WorkerLaunch(job_name="8f0c1a2e-5d1b-4c8e-9a9e-0123456789ab", world_size=2,
                        command=["python", "-m", "ctpipe.components.steps.train.worker"], env={}, deadline_seconds=30)


def _earlier_job(fake: FakeKubeAPI, backend: str, tmp_path: Path, attempt: int, phase: str | None) -> str:
    """The job a previous step pod created as ``attempt``, now Running (phase None) or ``phase``."""
    job, _ = _launcher(fake, backend, [], tmp_path).plan(_launch())
    job["metadata"]["annotations"][ATTEMPT_ANNOTATION] = str(attempt)
    fake.put_job(job)
    if phase:
        fake.set_condition(NS, job["metadata"]["name"], phase, "Earlier", "the earlier attempt's end")
    return job["metadata"]["name"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_restarted_step_follows_its_running_job_and_says_which_attempt(fake, tmp_path, backend):
    name = _earlier_job(fake, backend, tmp_path, attempt=2, phase=None)
    threading.Thread(target=run_job, args=(fake, NS, name), kwargs={"trainjob": backend == "trainjob"},
                     daemon=True).start()
    lines: list[str] = []
    _launcher(fake, backend, lines, tmp_path).run(_launch())
    assert fake.count("POST") == 0 and fake.count("DELETE") == 0
    assert any("re-attaching" in ln and "attempt 2 of 3" in ln for ln in lines), lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_job_is_recreated_as_its_next_attempt(fake, tmp_path, backend):
    name = _earlier_job(fake, backend, tmp_path, attempt=1, phase="Failed")
    fake.on_create = functools.partial(run_job, trainjob=backend == "trainjob")
    lines: list[str] = []
    _launcher(fake, backend, lines, tmp_path).run(_launch())
    assert fake.count("DELETE") == 1 and fake.count("POST") == 1
    assert fake.jobs[(NS, name)]["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "2"
    assert any("created" in ln and "attempt 2 of 3" in ln for ln in lines), lines


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_job_is_recreated_past_the_limit_across_step_restarts(fake, tmp_path, backend):
    """The last re-creation fails too: the step fails naming the attempt, however many step pods it took."""
    _earlier_job(fake, backend, tmp_path, attempt=2, phase="Failed")
    fake.on_create = functools.partial(run_job, trainjob=backend == "trainjob", outcome="Failed",
                                       reason="Boom", message="third attempt failed")
    lines: list[str] = []
    with pytest.raises(TrainingError, match=r"attempt 3 of 3 failed, giving up"):
        _launcher(fake, backend, lines, tmp_path).run(_launch())
    assert fake.count("POST") == 1  # attempt 3 only; no fourth


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_job_failed_on_its_last_attempt_is_not_recreated(fake, tmp_path, backend):
    _earlier_job(fake, backend, tmp_path, attempt=3, phase="Failed")
    with pytest.raises(TrainingError, match=r"attempt 3 of 3 failed, giving up"):
        _launcher(fake, backend, [], tmp_path).run(_launch())
    assert fake.count("POST") == 0


def test_a_job_of_that_name_not_created_by_the_step_is_left_alone(fake, tmp_path):
    job, _ = _launcher(fake, "pytorchjob", [], tmp_path).plan(_launch())
    job["metadata"]["labels"] = {"app": "someone-else"}
    job["metadata"]["annotations"] = {}
    fake.put_job(job)
    with pytest.raises(TrainingError, match="was not created by this train step"):
        _launcher(fake, "pytorchjob", [], tmp_path).run(_launch())
    assert fake.count("POST") == 0 and fake.count("DELETE") == 0
