"""At-least-once per data version: a run that died is retried (bounded, with backoff), a user error is not.

The runs here are real processes started by the real ``LocalStarter`` (a detached session, the ledger
record handed over, the leftover marker in its environment); only their body is a short script standing
in for ``ctpipe submit`` (the whole pipeline is what the end-to-end tests and benchmarks/soak.py run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.processes import pid_alive
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.triggers.ledger import Ledger
from ctpipe.pipelines.triggers.start import LocalStarter
from ctpipe.pipelines.triggers.watch import check_once

# What `ctpipe submit --record` does at its start, then a run that never ends by itself; it also starts a
# child (as the KFP local runner starts a step and the step its training ranks) and says where it is.
RUNNING = """
import os, subprocess, sys, time
from ctpipe.pipelines.triggers.start import record_outcome
record_outcome(sys.argv[1], status="running", pid=os.getpid(), started_at=time.time())
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(sys.argv[2], "a") as out:
    out.write(f"{os.getpid()} {child.pid}\\n")
time.sleep(300)
"""

# A run that ends by itself and records how, as `ctpipe submit` does (status, error, user_error).
ENDS = """
import json, os, sys, time
from ctpipe.pipelines.triggers.start import record_outcome
record_outcome(sys.argv[1], status="running", pid=os.getpid(), started_at=time.time())
outcome = json.loads(sys.argv[3])
record_outcome(sys.argv[1], **outcome, finished_at=time.time())
sys.exit(0 if outcome["status"] == "succeeded" else (2 if outcome.get("user_error") else 1))
"""


class ScriptStarter(LocalStarter):
    """The real LocalStarter, with a script in place of the ``ctpipe submit`` command line."""

    def __init__(self, home: Path, script: str, *extra: str, wait: bool = False) -> None:
        super().__init__(home, wait=wait)
        self.script, self.extra = script, extra

    def command(self, *, trigger: str, data_uri: str, record_path: Path) -> list[str]:
        return [sys.executable, "-c", self.script, str(record_path), str(self.home / "pids.txt"), *self.extra]


def outcome(**fields) -> str:
    return json.dumps(fields)


@pytest.fixture
def site(tmp_path):
    data, home = tmp_path / "data", tmp_path / "home"
    write_demo_data(data, days=2, rows_per_day=50)
    return data, home


def check(site, starter, *overrides: str, now: float | None = None):
    data, home = site
    # No champion in this registry yet, so every check wants the first run of the data version.
    config = load_config(None, ["watch.retry_backoff_seconds=60", "watch.retry_max_backoff_seconds=600", *overrides])
    return check_once(
        data_uri=str(data), home=home, config=config, tracking_uri=local_tracking_uri(home),
        starter=starter, dry_run=starter is None, now=now,
    )  # fmt: skip


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def started_pids(home: Path) -> list[tuple[int, int]]:
    path = home / "pids.txt"
    lines = path.read_text().split("\n") if path.exists() else []
    return [tuple(int(p) for p in line.split()) for line in lines if line.strip()]


def kill_run(starter: LocalStarter, pid: int) -> None:
    """SIGKILL the run's own process only (as the OOM killer does), and reap it."""
    os.kill(pid, signal.SIGKILL)
    starter._children[pid].wait(timeout=30)


def stop_everything(home: Path) -> None:
    """Cleanup of what the tests started, by pid."""
    for pids in started_pids(home):
        for pid in pids:
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_run_killed_during_training_is_retried_after_backoff_and_its_attempts_recorded(site):
    data, home = site
    t0 = time.time()
    try:
        first = ScriptStarter(home, RUNNING)
        decision = check(site, first, now=t0)
        assert (decision.action, decision.trigger) == ("run", "new_data")
        wait_for(lambda: len(started_pids(home)) == 1)
        (run_pid, step_pid), = started_pids(home)
        kill_run(first, run_pid)  # the node was preempted / the OOM killer chose the run

        # A later check (a new CronJob pod: a fresh starter) sees the run is gone: lost, retry after the backoff.
        later = ScriptStarter(home, RUNNING)
        settled = check(site, later, now=t0 + 5)
        assert settled.action == "none"
        assert "lost" in settled.reason and "attempt 2 of 3" in settled.reason, settled.reason
        record = Ledger(home).get(decision.fingerprint)
        assert record["status"] == "lost" and record["failure"] == "infrastructure"
        assert record["next_attempt_after"] == pytest.approx(t0 + 5 + 60)
        assert [a["status"] for a in record["attempts"]] == ["lost"]
        # The lost run's leftovers (its step, which would go on training) were stopped before any retry.
        wait_for(lambda: not pid_alive(step_pid))

        held = check(site, later, now=t0 + 30)
        assert held.action == "none" and "backoff" in held.reason and len(started_pids(home)) == 1

        retried = check(site, later, now=t0 + 66)
        assert (retried.action, retried.trigger, retried.attempt) == ("run", "new_data", 2)
        wait_for(lambda: len(started_pids(home)) == 2)
        record = Ledger(home).get(decision.fingerprint)
        assert record["attempt"] == 2 and record["status"] == "running"
        assert [a["status"] for a in record["attempts"]] == ["lost", "running"]
        assert record["attempts"][1]["pid"] == started_pids(home)[1][0] != run_pid

        # While attempt 2 runs, nobody starts another one.
        assert check(site, ScriptStarter(home, RUNNING), now=t0 + 4000).action == "none"
        assert len(started_pids(home)) == 2
    finally:
        stop_everything(home)


def test_retries_are_bounded_with_growing_backoff_then_given_up(site):
    data, home = site
    failing = outcome(status="failed", error="TrainingError: rank 1 exited with code -9", user_error=False)
    starter = ScriptStarter(home, ENDS, failing, wait=True)
    overrides = ("watch.max_attempts=3", "watch.retry_backoff_seconds=10", "watch.retry_max_backoff_seconds=15")
    t = time.time()
    first = check(site, starter, *overrides, now=t)
    assert first.action == "run" and first.run["status"] == "failed"
    waits = []
    for attempt in (2, 3):
        pending = check(site, starter, *overrides, now=t)
        record = Ledger(home).get(first.fingerprint)
        waits.append(record["next_attempt_after"] - t)
        assert pending.action == "none" and f"attempt {attempt} of 3" in pending.reason
        t = record["next_attempt_after"]
        retried = check(site, starter, *overrides, now=t)
        assert (retried.action, retried.attempt) == ("run", attempt)
    assert waits == pytest.approx([10, 15])  # doubled, then capped at retry_max_backoff_seconds
    final = check(site, starter, *overrides, now=t + 10_000)
    assert final.action == "none" and "gave up after 3 attempts" in final.reason
    assert "rank 1 exited" in final.reason  # the last error is said
    record = Ledger(home).get(first.fingerprint)
    assert record["given_up"] and [a["failure"] for a in record["attempts"]] == ["infrastructure"] * 3
    assert check(site, starter, *overrides, now=t + 20_000).action == "none"
    assert len(record["attempts"]) == 3


def test_a_user_error_is_not_retried_and_the_watcher_says_why(site):
    data, home = site
    bad_data = outcome(
        status="failed", user_error=True, error="DataValidationError: column 'tenure_months' has 12% nulls (max 1%)"
    )
    starter = ScriptStarter(home, ENDS, bad_data, wait=True)
    first = check(site, starter)
    assert first.action == "run" and first.run["exit_code"] == 2
    again = check(site, starter, now=time.time() + 10_000)
    assert again.action == "none"
    assert "not retried" in again.reason and "user error" in again.reason and "tenure_months" in again.reason
    record = Ledger(home).get(first.fingerprint)
    assert record["failure"] == "user_error" and record.get("next_attempt_after") is None
    assert len(record["attempts"]) == 1


def test_a_succeeded_run_is_never_started_again(site):
    data, home = site
    starter = ScriptStarter(home, ENDS, outcome(status="succeeded", model_version="4"), wait=True)
    assert check(site, starter).action == "run"
    again = check(site, starter, now=time.time() + 10_000)
    assert again.action == "none" and "already started" in again.reason and "succeeded" in again.reason
    assert len(Ledger(home).get(again.fingerprint)["attempts"]) == 1


def test_racing_watchers_start_one_retry(site):
    data, home = site
    failing = outcome(status="failed", error="RuntimeError: the node went away", user_error=False)
    assert check(site, ScriptStarter(home, ENDS, failing, wait=True), "watch.retry_backoff_seconds=0").action == "run"
    # The failure is seen by the first of the racers; exactly one of them starts attempt 2.
    decisions = []

    def watcher():
        decisions.append(check(site, ScriptStarter(home, RUNNING), "watch.retry_backoff_seconds=0"))

    try:
        threads = [threading.Thread(target=watcher) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(d.action for d in decisions) == ["none", "none", "none", "run"]
        wait_for(lambda: len(started_pids(home)) == 1)
        record = Ledger(home).get(decisions[0].fingerprint)
        assert record["attempt"] == 2 and [a["status"] for a in record["attempts"]] == ["failed", "running"]
    finally:
        stop_everything(home)


def _race_process(data: str, home: str, barrier) -> None:
    from ctpipe.pipelines.triggers.start import FunctionStarter

    barrier.wait()
    check((Path(data), Path(home)), FunctionStarter(lambda **kw: time.sleep(0.3)), "watch.retry_backoff_seconds=0")


def test_racing_watcher_processes_start_one_retry(site):
    import multiprocessing

    data, home = site
    failing = outcome(status="failed", error="RuntimeError: lost", user_error=False)
    assert check(site, ScriptStarter(home, ENDS, failing, wait=True), "watch.retry_backoff_seconds=0").action == "run"
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(3)
    procs = [ctx.Process(target=_race_process, args=(str(data), str(home), barrier)) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    record = Ledger(home).records()[0]
    assert [a["status"] for a in record["attempts"]] == ["failed", "succeeded"]


def test_a_retry_claimed_by_a_watcher_that_died_is_started_again_as_the_same_attempt(site):
    data, home = site
    failing = outcome(status="failed", error="RuntimeError: lost", user_error=False)
    t = time.time()
    first = check(site, ScriptStarter(home, ENDS, failing, wait=True), "watch.retry_backoff_seconds=0", now=t)
    ledger = Ledger(home)
    with ledger.locked():
        assert ledger.claim_attempt(first.fingerprint, 2, now=t)  # ...and the watcher died right here
    assert not Ledger(home).claim_attempt(first.fingerprint, 2, now=t)  # taken: nobody else claims it
    succeeding = ScriptStarter(home, ENDS, outcome(status="succeeded"), wait=True)
    assert check(site, succeeding, "watch.retry_backoff_seconds=0", now=t + 60).action == "none"  # in flight
    again = check(site, succeeding, "watch.retry_backoff_seconds=0", now=t + 3600)
    assert (again.action, again.attempt) == ("run", 2)
    assert [a["status"] for a in ledger.get(first.fingerprint)["attempts"]] == ["failed", "succeeded"]


def test_a_late_outcome_of_an_earlier_attempt_does_not_overwrite_the_current_one(site):
    from ctpipe.pipelines.triggers.start import record_outcome

    data, home = site
    failing = outcome(status="failed", error="RuntimeError: lost", user_error=False)
    first = check(site, ScriptStarter(home, ENDS, failing, wait=True), "watch.retry_backoff_seconds=0")
    try:
        assert check(site, ScriptStarter(home, RUNNING), "watch.retry_backoff_seconds=0").attempt == 2
        path = Ledger(home).path(first.fingerprint)
        record_outcome(path, attempt=1, status="succeeded")
        record = Ledger(home).get(first.fingerprint)
        assert record["status"] == "running" and record["attempts"][0]["status"] == "failed"
    finally:
        stop_everything(home)


def test_submit_records_a_user_error_and_exits_2(tmp_path, monkeypatch, capsys):
    import ctpipe.pipelines.local.local_run
    import ctpipe.pipelines.local.run_summary

    def bad_data_run(**kwargs):
        return {
            "status": "failed", "run_id": "r1", "summary_path": str(tmp_path / "summary.json"),
            "error": {"step": "validate_data", "message": "3 rows have a null label", "user_error": True},
        }  # fmt: skip

    monkeypatch.setattr(ctpipe.pipelines.local.local_run, "run_local", bad_data_run)
    monkeypatch.setattr(ctpipe.pipelines.local.run_summary, "format_summary", lambda summary: "")
    ledger = Ledger(tmp_path)
    ledger.claim("b" * 64, {"trigger": "new_data"})
    argv = ["submit", "--data", "/d", "--home", str(tmp_path), "--record", str(ledger.path("b" * 64)), "--attempt", "1"]
    assert main(argv) == 2
    record = ledger.get("b" * 64)
    assert record["status"] == "failed" and record["user_error"] is True
    assert record["error"] == "validate_data: 3 rows have a null label"
    assert record["attempts"][0]["user_error"] is True


def test_watch_status_lists_data_versions_and_their_attempts(site, capsys):
    data, home = site
    failing = outcome(status="failed", error="TrainingError: rank 1 exited with code -9", user_error=False)
    first = check(site, ScriptStarter(home, ENDS, failing, wait=True), "watch.retry_backoff_seconds=0")
    check(site, ScriptStarter(home, ENDS, outcome(status="succeeded", model_version="7"), wait=True),
          "watch.retry_backoff_seconds=0")  # fmt: skip
    write_demo_data(data, days=3, rows_per_day=50)  # a second data version, whose run a user error stops
    rejected = outcome(status="failed", user_error=True, error="SanityCheckError: loss at init 9.1, expected 0.69")
    second = check(site, ScriptStarter(home, ENDS, rejected, wait=True))
    assert second.fingerprint != first.fingerprint
    check(site, ScriptStarter(home, ENDS, rejected, wait=True))  # settles it: not retried

    assert main(["watch", "--status", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert first.fingerprint[:12] in table and second.fingerprint[:12] in table
    assert "trained" in table and "rejected" in table and "SanityCheckError" in table
    assert main(["watch", "--status", "--json", "--home", str(home)]) == 0
    listed = {v["fingerprint"]: v for v in json.loads(capsys.readouterr().out.strip().splitlines()[-1])["versions"]}
    trained = listed[first.fingerprint]
    assert trained["state"] == "trained" and [a["status"] for a in trained["attempts"]] == ["failed", "succeeded"]
    assert trained["attempts"][0]["failure"] == "infrastructure" and trained["attempts"][1]["model_version"] == "7"
    assert listed[second.fingerprint]["state"] == "rejected"


def test_watch_needs_data_unless_it_only_lists_the_status(tmp_path, capsys):
    assert main(["watch", "--home", str(tmp_path), "--once"]) == 2
    assert "--data" in capsys.readouterr().err
    assert main(["watch", "--status", "--home", str(tmp_path)]) == 0
    assert "no data versions" in capsys.readouterr().out


def test_retry_settings_are_validated():
    from ctpipe.components.lib.errors import ConfigError

    for bad, named in [
        ("watch.max_attempts=0", "watch.max_attempts"),
        ("watch.retry_backoff_seconds=-1", "watch.retry_backoff_seconds"),
        ("watch.retry_max_backoff_seconds=1", "watch.retry_max_backoff_seconds"),
    ]:
        with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
            load_config(None, [bad])
    assert load_config(None, []).watch.max_attempts == 3


def test_a_killed_process_is_seen_through_the_cli_too(site):
    """The issue's scenario end to end through ``ctpipe watch --once`` processes (no shortcuts)."""
    data, home = site
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "watch", "--data", str(data), "--home", str(home), "--once",
           "--json", "--set", "watch.retry_backoff_seconds=0"]  # fmt: skip
    starter = ScriptStarter(home, RUNNING)
    try:
        decision = check(site, starter, "watch.retry_backoff_seconds=0")
        wait_for(lambda: len(started_pids(home)) == 1)
        kill_run(starter, started_pids(home)[0][0])
        out = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True, env=env, timeout=120)
        line = json.loads(out.stdout.strip().splitlines()[-1])
        assert (line["action"], line["attempt"]) == ("run", 2), line
        assert "dry run" in line["reason"] and Ledger(home).get(decision.fingerprint)["status"] == "running"
    finally:
        stop_everything(home)


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> str:
    from ctpipe.pipelines.compile import compile_pipeline

    return str(compile_pipeline(tmp_path_factory.mktemp("compiled") / "pipeline.yaml", None, [], None))


@pytest.fixture
def kfp(monkeypatch, package):
    from ctpipe.pipelines.deploy import upload as deploy
    from tests.fakes.kfp_api import FakeKfpServer

    monkeypatch.setenv("KFP_TOKEN", "t")
    with FakeKfpServer(token="t") as server:
        client = deploy.connect(server.url)
        deploy.deploy(client, package, version_name="v1")
        yield server, client


def _runs_by_name(server) -> dict[str, dict]:
    return {r["display_name"]: r for r in server.state.runs.values()}


def test_a_failed_kfp_run_is_retried_as_a_new_run_but_a_failed_gate_is_not(site, kfp):
    import mlflow

    from ctpipe.components.lib.tracking import ensure_experiment
    from ctpipe.pipelines.triggers.start import KfpStarter

    data, home = site
    server, client = kfp
    uri = local_tracking_uri(home)
    starter = KfpStarter(client, experiment="ctpipe", tracking_uri=uri)
    first = check(site, starter, "watch.retry_backoff_seconds=0")
    assert first.action == "run" and first.attempt == 1
    name = f"ctpipe-new_data-{first.fingerprint[:16]}"
    assert set(_runs_by_name(server)) == {name}
    # The training pod was OOM-killed: the run fails in its train task, no gate judged anything.
    server.state.fail_run(first.run["run_id"], "train")  # KFP does not say why (OOMKilled)
    second = check(site, starter, "watch.retry_backoff_seconds=0")
    assert (second.action, second.attempt) == ("run", 2)
    runs = _runs_by_name(server)
    assert set(runs) == {name, f"{name}-attempt-2"}
    record = Ledger(home).get(first.fingerprint)
    assert record["attempts"][0]["failure"] == "infrastructure" and record["attempts"][0]["state"] == "FAILED"
    assert record["attempts"][0]["failed_tasks"] == [{"task": "train"}]
    assert "task train failed" in record["attempts"][0]["error"] and "no error message" not in record["attempts"][0]["error"]
    assert record["run_id"] == runs[f"{name}-attempt-2"]["run_id"]
    # Another watcher (another home, the same KFP) re-attaches to the attempt's run by name.
    assert starter.start(trigger="new_data", data_uri=str(data), fingerprint=first.fingerprint,
                         record_path=Ledger(home).path(first.fingerprint))["run_id"] == record["run_id"]  # fmt: skip
    assert len(server.state.runs) == 2

    # Attempt 2 reaches the data and validation rejects it: its MLflow run says so; that is not retried.
    experiment = ensure_experiment(uri, "ctpipe")
    ml = mlflow.MlflowClient(tracking_uri=uri)
    run = ml.create_run(experiment, tags={"ctpipe.pipeline_run_id": record["run_id"], "ctpipe.validation": "failed"})
    ml.set_terminated(run.info.run_id, "FAILED")
    server.state.fail_run(record["run_id"], "validate-data")
    third = check(site, starter, "watch.retry_backoff_seconds=0", now=time.time() + 10_000)
    assert third.action == "none" and "not retried" in third.reason and "data validation gate failed" in third.reason
    assert Ledger(home).get(first.fingerprint)["failure"] == "user_error" and len(server.state.runs) == 2


def test_a_lost_kfp_run_is_retried_and_a_cancelled_one_is_not(site, kfp):
    from ctpipe.pipelines.triggers.start import KfpStarter

    data, home = site
    server, client = kfp
    starter = KfpStarter(client, experiment="ctpipe")  # no tracking URI: a failure's cause cannot be read
    first = check(site, starter, "watch.retry_backoff_seconds=0")
    with server.state.lock:
        del server.state.runs[first.run["run_id"]]  # the KFP database lost it
    second = check(site, starter, "watch.retry_backoff_seconds=0")
    assert (second.action, second.attempt) == ("run", 2)
    record = Ledger(home).get(first.fingerprint)
    assert record["attempts"][0]["status"] == "lost" and "no longer exists" in record["attempts"][0]["error"]
    # An operator terminates it: KFP 2.17 on Argo reports CANCELING, then FAILED (never CANCELED).
    server.state.terminate_run(record["run_id"])
    third = check(site, starter, "watch.retry_backoff_seconds=0")
    assert third.action == "none" and "cancelled" in third.reason and "not retried" in third.reason
    assert len(server.state.runs) == 1  # the deleted one is gone; the cancelled one is not started again


def test_a_reused_pid_does_not_keep_a_killed_run_running(site):
    """The run's pid now belongs to another process (pids are reused): its missing marker gives it away."""
    data, home = site
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        record = {"status": "running", "backend": "local", "pid": other.pid, "marker": "0123456789abcdef:1"}
        assert pid_alive(other.pid) and not LocalStarter(home).is_active(record)
        assert LocalStarter(home).is_active({**record, "marker": None})  # without a marker: the pid is all we have
    finally:
        other.kill()
        other.wait()


def _first_check(data: str, home: str, barrier, out: str) -> None:
    from ctpipe.pipelines.triggers.start import FunctionStarter

    barrier.wait()
    decision = check((Path(data), Path(home)), FunctionStarter(lambda **kw: "started"))
    with open(out, "a") as f:
        f.write(decision.action + "\n")


def test_watchers_racing_on_a_fresh_home_create_its_tracking_store_once(site, tmp_path):
    """Each would run MLflow's schema migrations on the same new SQLite file; all but one used to crash."""
    import multiprocessing

    data, home = site
    assert not (home / "mlflow.db").exists()
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(3), tmp_path / "actions.txt"
    procs = [ctx.Process(target=_first_check, args=(str(data), str(home), barrier, str(out))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert sorted(out.read_text().split()) == ["none", "none", "run"]


def test_a_retry_whose_start_errs_after_kfp_created_its_run_is_reattached_not_run_twice(site, kfp):
    """The create request of attempt 2 reaches KFP but its answer is lost (a timeout, a dropped connection):
    the next check must re-attach to that run by its name, not start attempt 3 beside it."""
    from ctpipe.pipelines.triggers.start import KfpStarter

    data, home = site
    server, client = kfp
    starter = KfpStarter(client, experiment="ctpipe")
    first = check(site, starter, "watch.retry_backoff_seconds=0")
    server.state.fail_run(first.run["run_id"], "train")  # KFP does not say why (OOMKilled)
    real_run_pipeline = client.run_pipeline

    def created_then_timed_out(*args, **kwargs):
        real_run_pipeline(*args, **kwargs)
        raise TimeoutError("read timed out")

    client.run_pipeline = created_then_timed_out
    with pytest.raises(TimeoutError):
        check(site, starter, "watch.retry_backoff_seconds=0")
    client.run_pipeline = real_run_pipeline
    name = f"ctpipe-new_data-{first.fingerprint[:16]}-attempt-2"
    assert len([r for r in server.state.runs.values() if r["display_name"] == name]) == 1
    again = check(site, starter, "watch.retry_backoff_seconds=0")
    record = Ledger(home).get(first.fingerprint)
    running = [r for r in server.state.runs.values() if r["state"] in ("PENDING", "RUNNING")]
    assert [r["display_name"] for r in running] == [name], "two runs of one data version at once"
    assert (again.action, record["attempt"], record["status"]) == ("run", 2, "running")
    assert record["run_id"] == running[0]["run_id"]


def test_a_claim_cut_short_leaves_no_record_that_blocks_its_data_version(site, monkeypatch):
    """The disk fills up (or the watcher is killed) while the claim's record is written: the data version
    must not stay 'already started' by a half-written record forever; the next check starts it."""
    import errno
    import types

    from ctpipe.pipelines.triggers import ledger as ledger_module
    from ctpipe.pipelines.triggers.start import FunctionStarter

    data, home = site

    def full_disk_dump(obj, handle, **kwargs):
        handle.write(json.dumps(obj)[:10])  # part of it reaches the file, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    def full_disk_dumps(obj, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    failing = types.SimpleNamespace(dump=full_disk_dump, dumps=full_disk_dumps, loads=json.loads)
    monkeypatch.setattr(ledger_module, "json", failing)
    with pytest.raises(OSError, match="No space left"):
        check(site, FunctionStarter(lambda **kw: "started"))
    monkeypatch.setattr(ledger_module, "json", json)
    assert list((home / "watch" / "ledger").glob("*.json")) == []
    again = check(site, FunctionStarter(lambda **kw: "started"))
    assert (again.action, again.run["status"]) == ("run", "succeeded")


def test_an_unreadable_ledger_record_is_a_clear_error_not_a_run_already_started(site, capsys):
    """A record left empty or garbled (a watcher killed mid-claim by an older ctpipe, a power loss, an edit
    by hand) said 'already started at 1970-01-01' at every check: the data version was silently never
    trained. It is an error naming the file and what to do, and --status lists it."""
    from ctpipe.components.lib.errors import UserError
    from ctpipe.pipelines.triggers.new_data import data_state
    from ctpipe.pipelines.triggers.start import FunctionStarter

    data, home = site
    fingerprint = data_state(str(data)).fingerprint
    path = Ledger(home).path(fingerprint)
    path.write_text('{"fingerprint": "')
    with pytest.raises(UserError, match="unreadable") as caught:
        check(site, FunctionStarter(lambda **kw: "started"))
    assert str(path) in str(caught.value) and "delete" in str(caught.value)
    assert main(["watch", "--status", "--home", str(home)]) == 0
    listed = capsys.readouterr().out
    assert fingerprint[:12] in listed and "unreadable" in listed


def test_a_local_run_on_another_machine_is_not_judged_lost_by_a_watcher_here(site, monkeypatch, capsys):
    """Two machines share the home (NFS, as documented): a watcher on machine B cannot see machine A's
    processes. It used to settle A's running attempt as lost and start a second run of the data version."""
    import socket

    from ctpipe.pipelines.triggers import start as start_module
    from ctpipe.pipelines.triggers import status as status_module

    data, home = site
    monkeypatch.setattr(socket, "gethostname", lambda: "machine-a")
    try:
        first = check(site, ScriptStarter(home, RUNNING))
        wait_for(lambda: len(started_pids(home)) == 1 and Ledger(home).get(first.fingerprint)["status"] == "running")
        # Machine B: its own name, and A's processes are not in its process table (nor /proc).
        monkeypatch.setattr(socket, "gethostname", lambda: "machine-b")
        monkeypatch.setattr(start_module, "pid_alive", lambda pid: False)
        monkeypatch.setattr(status_module, "pid_alive", lambda pid: False)
        monkeypatch.setattr(start_module, "marked_processes", lambda marker: [])
        later = check(site, ScriptStarter(home, RUNNING), "watch.retry_backoff_seconds=0", now=time.time() + 3600)
        assert later.action == "none" and "machine-a" in later.reason
        assert len(started_pids(home)) == 1
        record = Ledger(home).get(first.fingerprint)
        assert (record["attempt"], record["status"], record["host"]) == (1, "running", "machine-a")
        assert main(["watch", "--status", "--home", str(home)]) == 0
        listed = capsys.readouterr().out
        assert "lost?" not in listed and "running" in listed and "machine-a" in listed
        # New data waits for it (watch.max_running=1), and the check says where it runs and what to do.
        write_demo_data(data, days=3, rows_per_day=50)
        newer = check(site, ScriptStarter(home, RUNNING))
        assert newer.action == "none" and f"{first.fingerprint[:12]} on machine-a" in newer.reason
        assert "delete its ledger record" in newer.reason and len(started_pids(home)) == 1
    finally:
        stop_everything(home)


def test_deleting_the_record_of_a_cancelled_kfp_run_starts_it_again_as_the_decision_says(site, kfp):
    """'Delete its ledger record so that the watcher does' (start it again): on KFP the next claim re-attached
    to the old run of the same name, which was cancelled (or failed), so nothing ever ran again."""
    from ctpipe.pipelines.triggers.start import KfpStarter

    data, home = site
    server, client = kfp
    starter = KfpStarter(client, experiment="ctpipe")
    first = check(site, starter)
    server.state.terminate_run(first.run["run_id"])  # as KFP 2.17 reports a Terminate
    cancelled = check(site, starter)
    assert cancelled.action == "none" and "delete its ledger record" in cancelled.reason
    Ledger(home).path(first.fingerprint).unlink()
    again = check(site, starter)
    assert again.action == "run" and again.run["run_id"] != first.run["run_id"]
    assert server.state.runs[again.run["run_id"]]["state"] in ("PENDING", "RUNNING")
    assert check(site, starter).action == "none"  # and that new run is followed, not cancelled again
    assert Ledger(home).get(first.fingerprint)["status"] == "running"


def test_claims_work_on_a_filesystem_without_hard_links(site, monkeypatch):
    """The claim is written whole and hard-linked to its name; where links are refused (some FUSE or SMB
    mounts) it falls back on an exclusive create, still one claim per data version."""
    import errno

    from ctpipe.components.lib import atomic_files as atomic
    from ctpipe.pipelines.triggers.start import FunctionStarter

    data, home = site

    def no_links(*args):
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "link", no_links)
    counter = []
    first = check(site, FunctionStarter(lambda **kw: counter.append(kw)))
    again = check(site, FunctionStarter(lambda **kw: counter.append(kw)))
    assert (first.action, again.action, len(counter)) == ("run", "none", 1)
    assert not Ledger(home).claim(first.fingerprint, {"trigger": "new_data"})
    assert [p.name for p in (home / "watch" / "ledger").iterdir() if p.name != ".lock"] == [f"{first.fingerprint}.json"]


def test_a_run_that_trained_other_data_does_not_settle_this_version_as_trained(site, capsys):
    # Issue 46: the watcher saw the new content hash, started a run, KFP reused the cache of the old data, and the
    # ledger said the new version was trained by version 1, a model that never saw it.
    data, home = site
    older = "0" * 64
    served = outcome(status="succeeded", model_version="1", data_fingerprint=older, model_fingerprint=older)
    first = check(site, ScriptStarter(home, ENDS, served, wait=True))
    assert first.action == "run"
    again = check(site, ScriptStarter(home, ENDS, outcome(status="succeeded", model_version="2"), wait=True))
    assert Ledger(home).get(first.fingerprint)["attempts"][0]["failure"] == "data_changed"
    # The data is still this version: it is started again at once, and that run (its own data) trains it.
    assert (again.action, again.attempt) == ("run", 2)
    check(site, ScriptStarter(home, ENDS, served, wait=True))  # settles attempt 2
    assert Ledger(home).get(first.fingerprint)["status"] == "succeeded"
    assert main(["watch", "--status", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert "trained: attempt 2 succeeded (model version 2)" in table


def test_a_version_whose_run_read_other_data_is_superseded_and_never_trained(site):
    data, home = site
    other = outcome(status="succeeded", model_version="3", data_fingerprint="1" * 64)
    first = check(site, ScriptStarter(home, ENDS, other, wait=True))
    write_demo_data(data, days=3, rows_per_day=50)  # the data moved on; the old version is settled as superseded
    check(site, ScriptStarter(home, ENDS, outcome(status="succeeded"), wait=True))
    from ctpipe.pipelines.triggers.status import list_versions

    listed = {v["fingerprint"]: v for v in list_versions(home)}
    assert listed[first.fingerprint]["state"] == "superseded"
    assert "not trained" in listed[first.fingerprint]["decision"] and "1111111111" in listed[first.fingerprint]["decision"]


def test_a_user_error_is_retried_once_the_resolved_config_changes_and_status_says_why(site, capsys):
    # Issue 46: a run that failed as a user error (the demo data without data.key=customer_id) was settled for its
    # data version; the watcher run again with the corrected config did not retry it.
    data, home = site
    rejected = outcome(status="failed", user_error=True, error="DataValidationError: column 'customer_id' is id-like")
    first = check(site, ScriptStarter(home, ENDS, rejected, wait=True))
    same = check(site, ScriptStarter(home, ENDS, rejected, wait=True), now=time.time() + 10)
    assert same.action == "none" and "not retried" in same.reason
    fixed = check(site, ScriptStarter(home, ENDS, outcome(status="succeeded", model_version="1"), wait=True),
                  "data.key=customer_id")
    assert (fixed.action, fixed.attempt) == ("run", 2) and "config changed" in fixed.reason
    record = Ledger(home).get(first.fingerprint)
    assert record["attempts"][0]["config_sha256"] != record["attempts"][1]["config_sha256"]
    assert main(["watch", "--status", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert "trained: attempt 2 succeeded (model version 1)" in table
    # The entry of a rejected version says why it is settled, and that a changed config retries it.
    write_demo_data(data, days=3, rows_per_day=50)
    check(site, ScriptStarter(home, ENDS, rejected, wait=True))
    check(site, ScriptStarter(home, ENDS, rejected, wait=True))
    assert main(["watch", "--status", "--home", str(home)]) == 0
    table = capsys.readouterr().out
    assert "settled" in table and "the next check with a changed config starts it again" in table


def test_submit_hands_the_runs_data_version_over_and_records_what_it_trained(tmp_path, monkeypatch, capsys):
    import ctpipe.pipelines.local.local_run
    import ctpipe.pipelines.local.run_summary

    seen = {}

    def cached_run(**kwargs):
        seen.update(kwargs)
        return {"status": "succeeded", "run_id": "r1", "summary_path": str(tmp_path / "summary.json"),
                "model_version": "1", "data_fingerprint": "b" * 64, "model_data_fingerprint": "c" * 64}

    monkeypatch.setattr(ctpipe.pipelines.local.local_run, "run_local", cached_run)
    monkeypatch.setattr(ctpipe.pipelines.local.run_summary, "format_summary", lambda summary: "")
    ledger = Ledger(tmp_path)
    ledger.claim("b" * 64, {"trigger": "new_data"})
    command = LocalStarter(tmp_path).command(trigger="new_data", data_uri="/d", record_path=ledger.path("b" * 64))
    assert command[command.index("--fingerprint") + 1] == "b" * 64
    assert main(command[3:]) == 0
    assert seen["expected_fingerprint"] == "b" * 64
    record = ledger.get("b" * 64)
    assert record["data_fingerprint"] == "b" * 64 and record["model_fingerprint"] == "c" * 64
    from ctpipe.components.lib.config import WatchConfig
    from ctpipe.pipelines.triggers.retry import settle

    assert settle(record, WatchConfig(), time.time())["failure"] == "data_changed"


def test_a_kfp_run_gets_its_data_version_and_one_that_read_other_data_is_not_settled_as_trained(site, kfp):
    import mlflow

    from ctpipe.components.lib.tracking import ensure_experiment
    from ctpipe.pipelines.triggers.start import KfpStarter

    data, home = site
    server, client = kfp
    uri = local_tracking_uri(home)
    starter = KfpStarter(client, experiment="ctpipe", tracking_uri=uri)
    first = check(site, starter, "watch.retry_backoff_seconds=0")
    run = server.state.runs[first.run["run_id"]]
    assert run["runtime_config"]["parameters"]["data_fingerprint"] == first.fingerprint
    # The run succeeded, but its MLflow run says it read other data (a pipeline version without the check).
    ml = mlflow.MlflowClient(tracking_uri=uri)
    ml.create_run(ensure_experiment(uri, "ctpipe"), tags={
        "ctpipe.pipeline_run_id": first.run["run_id"], "ctpipe.data_fingerprint": "2" * 64,
        "ctpipe.registered_version": "1", "ctpipe.registered_data_fingerprint": "2" * 64})
    server.state.set_run_state(first.run["run_id"], "SUCCEEDED")
    again = check(site, starter, "watch.retry_backoff_seconds=0")
    attempt = Ledger(home).get(first.fingerprint)["attempts"][0]
    assert attempt["failure"] == "data_changed" and attempt["model_version"] == "1"
    assert (again.action, again.attempt) == ("run", 2)  # the data is still this version: its own run now
