"""validation.engine=spark on a cluster: the validate step runs a SparkApplication through the stand-in Spark
Operator (tests/fakes/spark_operator.py, real REST through the kubernetes client), follows it to the end, streams
its driver's log, and gives the step the outputs of a local validation. The driver is a stub of the Spark
engine's contract (tests/fakes/spark_driver_stub.py)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from kubernetes import client

from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.lib.kube.discovery import SparkOperatorMissing
from ctpipe.components.lib.kube.pod import JobValidationError
from ctpipe.components.lib.kube.pod_security import restricted_violations
from ctpipe.components.lib.kube.sparkapplication import SparkLaunch
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.validate_data.on_spark_cluster import (
    check_data_reachable,
    runs_on_spark_cluster,
    validate_on_spark_cluster,
)
from ctpipe.components.steps.validate_data.spark_launcher import (
    ATTEMPT_ANNOTATION,
    SparkApplicationError,
    SparkApplicationLauncher,
)
from tests.fakes.k8s_api import PYTORCHJOB_CRDS, FakeKubeAPI
from tests.fakes.spark_driver_stub import MODE_ENV
from tests.fakes.spark_operator import SparkOperator

NS = "team-a"
RUN = "0b1c2d3e-aaaa-bbbb-cccc-0123456789ab"
STUB = "tests.fakes.spark_driver_stub"


@pytest.fixture
def fake():
    with FakeKubeAPI() as api:
        yield api


def _config(tmp_path: Path, *extra: str):
    return load_config(overrides=["validation.engine=spark", "train.backend=trainjob", f"kubernetes.namespace={NS}",
                                  f"kubernetes.shared_mount_path={tmp_path / 'pvc'}", "kubernetes.spark_backoff_limit=2",
                                  *extra])


def _launcher(fake: FakeKubeAPI, config, lines: list[str], **kw) -> SparkApplicationLauncher:
    conf = client.Configuration()
    conf.host = fake.url
    kw = {"poll_seconds": 0.05, "backoff_seconds": 0.01, "grace_seconds": 0.0, "watch_seconds": 5, **kw}
    return SparkApplicationLauncher(config, api_client=client.ApiClient(conf), emit=lines.append, **kw)


class Step:
    """The validate step's paths (local to its pod, as KFP gives them) and a call of the step's function."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.snapshot = tmp_path / "step" / "snapshot"
        self.docs = tmp_path / "step" / "data_docs"
        self.report = tmp_path / "step" / "validation_report"
        self.snapshot.mkdir(parents=True)  # KFP makes an output artifact's folder
        (tmp_path / "pvc" / "data").mkdir(parents=True)

    def run(self, fake: FakeKubeAPI, config, lines: list[str], *, data: str | None = None, **kw):
        return validate_on_spark_cluster(
            data or str(self.tmp / "pvc" / "data"), config, snapshot_dir=str(self.snapshot), data_docs_path=str(self.docs),
            report_path=str(self.report), tracking_uri="", mlflow_run_id=RUN, module=STUB,
            launcher=_launcher(fake, config, lines, **kw))


def _operator(fake: FakeKubeAPI, mode: str, **kw) -> SparkOperator:
    return SparkOperator(extra_env={MODE_ENV: mode}, **kw).attach(fake)


def test_the_selection_rule_spark_engine_on_a_cluster_pipeline(tmp_path):
    data = str(tmp_path)
    assert runs_on_spark_cluster(data, load_config(overrides=["validation.engine=spark", "train.backend=auto"]))
    assert not runs_on_spark_cluster(data, load_config(overrides=["validation.engine=spark", "train.backend=local"]))
    assert not runs_on_spark_cluster(data, load_config(overrides=["train.backend=auto"]))  # engine local, the default


def test_engine_auto_on_a_cluster_submits_an_application_above_spark_min_rows(tmp_path):
    import pandas as pd

    for day, rows in (("2026-01-01", 40), ("2026-01-02", 30)):
        pd.DataFrame({"x": range(rows)}).to_parquet(tmp_path / f"{day}.parquet")
    cluster = ["validation.engine=auto", "train.backend=auto"]
    assert runs_on_spark_cluster(str(tmp_path), load_config(overrides=[*cluster, "validation.spark_min_rows=69"]))
    assert not runs_on_spark_cluster(str(tmp_path), load_config(overrides=[*cluster, "validation.spark_min_rows=70"]))
    assert not runs_on_spark_cluster(str(tmp_path), load_config(overrides=[
        "validation.engine=auto", "train.backend=local", "validation.spark_min_rows=1"]))  # local: local[*] Spark


def test_a_completed_application_gives_the_step_its_outputs(fake, tmp_path):
    operator = _operator(fake, "pass")
    lines: list[str] = []
    step = Step(tmp_path)
    result = step.run(fake, _config(tmp_path), lines)
    assert result.fingerprint == "stub-fingerprint" and result.rows == {"train": 8, "val": 1, "test": 1}
    assert result.warnings == ["stub warning"]
    # What the driver wrote on the shared volume is the step's output now.
    assert (step.snapshot / "train.parquet").read_bytes() == b"PAR1 stub"
    assert "passed" in step.docs.read_text() and "passed" in step.report.read_text()
    ((app, driver, executors),) = operator.record
    assert app["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "1" and len(executors) == 2
    for pod in (driver, *executors):  # what the operator and Spark made of it starts in a restricted namespace
        assert restricted_violations(pod) == [], pod["metadata"]["name"]
    argv = app["spec"]["arguments"]
    assert argv[0] == STUB and argv[argv.index("--snapshot") + 1].startswith(str(tmp_path / "pvc" / "jobs"))
    # The driver's log is in the step's log, and the states the operator reported.
    assert any(" driver] stub driver: passed" in ln for ln in lines), lines
    assert any("SparkApplication" in ln and "RUNNING (executors: 2 RUNNING)" in ln for ln in lines), lines
    assert any(ln.endswith(": COMPLETED (executors: 2 COMPLETED)") for ln in lines), lines
    assert fake.count("POST") == 1 and fake.count("DELETE") == 0  # its TTL deletes it (clean_pod_policy Running)


def test_a_failed_validation_fails_the_step_as_locally_and_is_not_run_again(fake, tmp_path):
    _operator(fake, "fail")
    step = Step(tmp_path)
    lines: list[str] = []
    with pytest.raises(DataValidationError, match=r"failed .* with 1 error\(s\): \(1\) column values to be between"):
        step.run(fake, _config(tmp_path), lines)
    assert "failed: column x is out of range" in step.report.read_text()  # the reports reach the step anyway
    assert fake.count("POST") == 1, "a driver exiting 2 (bad data) is not created again"


def test_a_driver_refusing_its_input_is_a_user_error_with_its_log(fake, tmp_path):
    _operator(fake, "refuse")
    with pytest.raises(UserError, match="stopped with a user error") as err:
        Step(tmp_path).run(fake, _config(tmp_path), [])
    assert "ExitCode: 2" in str(err.value) and "stub driver: config refused" in str(err.value)
    assert fake.count("POST") == 1


def test_a_crashed_driver_is_created_again_and_its_retry_succeeds(fake, tmp_path):
    operator = _operator(fake, "crash-once")
    lines: list[str] = []
    result = Step(tmp_path).run(fake, _config(tmp_path), lines)
    assert result.fingerprint == "stub-fingerprint"
    assert fake.count("POST") == 2 and fake.count("DELETE") == 1
    assert [a["metadata"]["annotations"][ATTEMPT_ANNOTATION] for a, _, _ in operator.record] == ["1", "2"]
    # The next application is created only once the old driver pod is gone (spark-submit would fail on its name).
    deleted = next(i for i, (m, _) in enumerate(fake.requests) if m == "DELETE")
    created = [i for i, (m, _) in enumerate(fake.requests) if m == "POST"][1]
    driver = f"/pods/{operator.record[0][1]['metadata']['name']}"
    assert any(m == "GET" and p.endswith(driver) for m, p in fake.requests[deleted:created])
    assert any("driver container failed with ExitCode: 1" in ln and "lost an executor" in ln for ln in lines), lines


def test_re_creations_are_bounded(fake, tmp_path):
    _operator(fake, "crash")
    with pytest.raises(SparkApplicationError, match=r"attempt 3 of 3 failed, giving up"):
        Step(tmp_path).run(fake, _config(tmp_path), [])
    assert fake.count("POST") == 3


def test_a_failed_submission_counts_as_an_attempt(fake, tmp_path):
    _operator(fake, "pass", submit_failures=1)
    lines: list[str] = []
    Step(tmp_path).run(fake, _config(tmp_path), lines)
    assert fake.count("POST") == 2
    assert any("FAILED: failed to run spark-submit" in ln for ln in lines), lines


def _earlier(fake: FakeKubeAPI, tmp_path: Path, step: Step, *, attempt: int) -> dict:
    """The application an earlier step pod created for this run, as ``attempt``."""
    from ctpipe.components.steps.validate_data.on_spark_cluster import build_spark_launch

    config = _config(tmp_path)
    launch = build_spark_launch(str(tmp_path / "pvc" / "data"), config, snapshot_dir=str(step.snapshot),
                                data_docs_path=str(step.docs), report_path=str(step.report),
                                result_path=str(tmp_path / "old" / "validation_result.json"), launch_name=RUN,
                                module=STUB)
    app, _ = _launcher(fake, config, []).plan(launch)
    app["metadata"]["annotations"][ATTEMPT_ANNOTATION] = str(attempt)
    return fake.put_job(app)


def test_a_retried_step_re_attaches_to_its_running_application(fake, tmp_path):
    """KFP retried the step (or its pod restarted): the application it created is followed, not created again.
    The result record's folder on the shared volume is the same, whatever temp folder the new pod picked."""
    step = Step(tmp_path)
    app = _earlier(fake, tmp_path, step, attempt=2)
    threading.Thread(target=SparkOperator(extra_env={MODE_ENV: "pass"}),
                     args=(fake, NS, app["metadata"]["name"]), daemon=True).start()
    lines: list[str] = []
    result = step.run(fake, _config(tmp_path), lines)
    assert result.fingerprint == "stub-fingerprint"
    assert fake.count("POST") == 0 and fake.count("DELETE") == 0
    assert any("re-attaching" in ln and "attempt 2 of 3" in ln for ln in lines), lines


def test_a_retried_step_replaces_an_application_that_crashed(fake, tmp_path):
    step = Step(tmp_path)
    app = _earlier(fake, tmp_path, step, attempt=1)
    fake.put_job({**app, "status": {"applicationState": {"state": "FAILED", "errorMessage":
                                                          "driver container failed with ExitCode: 137, Reason: OOMKilled"}}})
    _operator(fake, "pass")
    lines: list[str] = []
    step.run(fake, _config(tmp_path), lines)
    assert fake.count("DELETE") == 1 and fake.count("POST") == 1
    assert fake.jobs[(NS, app["metadata"]["name"])]["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "2"


def test_an_application_of_that_name_not_created_by_the_step_is_left_alone(fake, tmp_path):
    step = Step(tmp_path)
    app = _earlier(fake, tmp_path, step, attempt=1)
    fake.put_job({**app, "metadata": {**app["metadata"], "labels": {"team": "other"}}})
    with pytest.raises(SparkApplicationError, match="was not created by this validate step"):
        step.run(fake, _config(tmp_path), [])
    assert fake.count("POST") == 0 and fake.count("DELETE") == 0


def test_without_the_operator_the_step_stops_naming_its_crd(fake, tmp_path):
    fake.served = dict(PYTORCHJOB_CRDS)
    with pytest.raises(SparkOperatorMissing, match=r"CRD sparkapplications\.sparkoperator\.k8s\.io"):
        Step(tmp_path).run(fake, _config(tmp_path), [])
    assert fake.count("POST") == 0


def _hang_launch(tmp_path: Path, deadline: int) -> SparkLaunch:
    return SparkLaunch(job_name=RUN, deadline_seconds=deadline, command=[
        "python", "-m", STUB, "--data-uri", "d", "--config-json", "{}", "--snapshot", str(tmp_path / "s"),
        "--data-docs", str(tmp_path / "d"), "--report", str(tmp_path / "r"), "--result", str(tmp_path / "x")])


def test_past_its_deadline_the_application_is_deleted(fake, tmp_path):
    _operator(fake, "hang")
    started = time.monotonic()
    with pytest.raises(SparkApplicationError, match="did not finish within kubernetes.spark_deadline_seconds=1"):
        _launcher(fake, _config(tmp_path), [], grace_seconds=0.5).run(_hang_launch(tmp_path, 1))
    assert time.monotonic() - started < 15
    assert fake.count("DELETE", "/sparkapplications/") == 1 and not fake.jobs


def test_a_cancelled_step_deletes_its_application(fake, tmp_path):
    operator = _operator(fake, "hang")

    def cancel_once_running() -> None:
        while not operator.record:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGTERM)  # what KFP does to the step's pod on cancel

    threading.Thread(target=cancel_once_running, daemon=True).start()
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SparkApplicationError, match="cancelled and deleted"):
        _launcher(fake, _config(tmp_path), []).run(_hang_launch(tmp_path, 600))
    assert fake.count("DELETE", "/sparkapplications/") == 1 and not fake.jobs
    assert signal.getsignal(signal.SIGTERM) is before


def test_without_a_shared_volume_or_with_unreachable_data_nothing_is_created(fake, tmp_path):
    _operator(fake, "pass")
    with pytest.raises(JobValidationError, match="kubernetes.shared_pvc is unset"):
        _launcher(fake, _config(tmp_path, "kubernetes.shared_pvc=null"), []).run(_hang_launch(tmp_path, 60))
    with pytest.raises(UserError, match="is not where the Spark pods can read it"):
        Step(tmp_path).run(fake, _config(tmp_path), [], data=str(tmp_path / "elsewhere"))
    check_data_reachable("s3://bucket/data", _config(tmp_path, "kubernetes.shared_pvc=null"))  # a URL needs none
    assert fake.count("POST") == 0


def test_a_completed_application_without_a_result_record_is_an_infrastructure_failure(fake, tmp_path):
    _operator(fake, "silent")
    with pytest.raises(SparkApplicationError, match="wrote no result record"):
        Step(tmp_path).run(fake, _config(tmp_path), [])


def test_transient_api_errors_are_retried_and_failing_watches_fall_back_to_polling(fake, tmp_path):
    _operator(fake, "pass")
    fake.fail("POST", "/sparkapplications", 500, times=2)
    fake.fail("POST", "/sparkapplications", 429, times=1)
    fake.fail("GET", "watch=true", 503, times=4)  # three failed watches: the launcher polls instead
    lines: list[str] = []
    assert Step(tmp_path).run(fake, _config(tmp_path), lines).fingerprint == "stub-fingerprint"
    assert fake.count("POST", "/sparkapplications") == 4
    assert any("transient Kubernetes API error (500)" in ln for ln in lines), lines
    assert any("failed (503); polling" in ln for ln in lines), lines


def test_an_application_the_operator_never_picks_up_is_named_in_the_log(fake, tmp_path):
    fake.on_create = None  # the CRD is served, but no controller watches the namespace
    lines: list[str] = []
    with pytest.raises(SparkApplicationError, match="did not finish"):
        _launcher(fake, _config(tmp_path), lines, watch_seconds=1, operator_wait_seconds=0.5,
                  grace_seconds=0.0).run(_hang_launch(tmp_path, 3))
    warned = [ln for ln in lines if "has no state after" in ln]
    assert len(warned) == 1 and "spark.jobNamespaces" in warned[0], lines
