"""The watcher on real Parquet partitions with a champion in a real (SQLite) MLflow registry.

Runs are not really started: a function starter counts them (the local starter spawns the whole
pipeline, which the end-to-end tests cover).
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import mlflow
import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.reference_stats import compute_reference_stats
from ctpipe.components.lib.data.snapshot import fingerprint_files, infer_schema, list_data_files, read_data
from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.triggers.ledger import Ledger
from ctpipe.pipelines.triggers.new_data import data_state
from ctpipe.pipelines.triggers.start import FunctionStarter
from ctpipe.pipelines.triggers.watch import check_once
from tests.fixtures.damage import flip_bytes

MODEL = "ctpipe-classifier"


def register_champion(home: Path, data_root: Path) -> str:
    """A registered model version trained (so its tags say) on ``data_root``, with reference stats, as champion."""
    uri = local_tracking_uri(home)
    experiment_id = ensure_experiment(uri, "ctpipe")
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    run = client.create_run(experiment_id)
    files = list_data_files(str(data_root))
    frame = read_data(str(data_root), files)
    schema = infer_schema(frame, label="label", key="customer_id", features=[], categorical=[])
    stats_path = home / "tmp-reference" / "reference_stats.json"
    stats_path.parent.mkdir(parents=True, exist_ok=True)
    stats_path.write_text(json.dumps(compute_reference_stats(frame, schema)))
    client.log_artifact(run.info.run_id, str(stats_path), "reference")
    client.set_terminated(run.info.run_id)
    fingerprint = fingerprint_files(files)
    client.create_registered_model(MODEL)
    version = client.create_model_version(
        MODEL, source=f"{run.info.artifact_uri}/ctpipe", run_id=run.info.run_id,
        tags={"ctpipe.data_fingerprint": fingerprint, "ctpipe.trigger": "manual"},
    )
    client.set_registered_model_alias(MODEL, "champion", version.version)
    return fingerprint


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, Path, str]:
    base = tmp_path_factory.mktemp("watch-template")
    data, home = base / "data", base / "home"
    write_demo_data(data, days=7, rows_per_day=400)
    fingerprint = register_champion(home, data)
    return data, home, fingerprint


@pytest.fixture
def site(template, tmp_path) -> tuple[Path, Path, str]:
    """A fresh copy of the data root and the home (champion trained on the 7 days) for one test."""
    data, home, fingerprint = template
    shutil.copytree(data, tmp_path / "data")
    shutil.copytree(home, tmp_path / "home")
    return tmp_path / "data", tmp_path / "home", fingerprint


class Counter:
    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[dict] = []
        self.delay = delay
        self.lock = threading.Lock()

    def __call__(self, **kwargs):
        time.sleep(self.delay)
        with self.lock:
            self.calls.append(kwargs)
        return "started"


def check(data: Path, home: Path, starter=None, overrides=(), **kwargs):
    config = load_config(None, ["watch.min_rows=100", *overrides])
    return check_once(
        data_uri=str(data), home=home, config=config, tracking_uri=local_tracking_uri(home),
        starter=starter, dry_run=starter is None, **kwargs,
    )


def add_days(data: Path, days: int, drift_from_day: int | None = None) -> None:
    """Rewrite the demo data with more days (the first 7 are byte-identical to before)."""
    write_demo_data(data, days=days, rows_per_day=400, drift_from_day=drift_from_day)


def test_cached_fingerprint_equals_the_validation_fingerprint_and_skips_unchanged_files(tmp_path):
    write_demo_data(tmp_path / "data", days=3, rows_per_day=50)
    cache = tmp_path / "cache.json"
    first = data_state(str(tmp_path / "data"), cache)
    assert first.fingerprint == fingerprint_files(list_data_files(str(tmp_path / "data")))
    assert first.hashed == 3
    again = data_state(str(tmp_path / "data"), cache)
    assert (again.fingerprint, again.hashed) == (first.fingerprint, 0)
    part = next((tmp_path / "data").glob("date=2026-01-02/*.parquet"))
    part.write_bytes(part.read_bytes() + b"\0")  # same name, new content
    changed = data_state(str(tmp_path / "data"), cache)
    assert changed.hashed == 1 and changed.fingerprint != first.fingerprint
    assert changed.fingerprint == fingerprint_files(list_data_files(str(tmp_path / "data")))
    assert first.partitions()[-1] == "date=2026-01-03" and len(first.window(2)) == 2
    assert [f.path.split("/")[0] for f in first.window(1, days=2)] == ["date=2026-01-02", "date=2026-01-03"]


def test_a_rewrite_that_keeps_size_and_mtime_is_detected(tmp_path):
    """Before: the hash cache was keyed by (size, mtime) only, so a partition rewritten with other bytes of
    the same size and its old mtime put back (cp -p, rsync -t, touch -d) kept its old hash and fingerprint."""
    write_demo_data(tmp_path / "data", days=3, rows_per_day=50)
    cache = tmp_path / "cache.json"
    first = data_state(str(tmp_path / "data"), cache)
    part = next((tmp_path / "data").glob("date=2026-01-02/*.parquet"))
    before = part.stat()
    flip_bytes(part)
    os.utime(part, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (part.stat().st_size, part.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    changed = data_state(str(tmp_path / "data"), cache)
    assert changed.hashed == 1 and changed.fingerprint != first.fingerprint
    assert changed.fingerprint == fingerprint_files(list_data_files(str(tmp_path / "data")))
    again = data_state(str(tmp_path / "data"), cache)  # and the cache serves it again once re-hashed
    assert (again.fingerprint, again.hashed) == (changed.fingerprint, 0)


def test_nothing_new_starts_nothing_and_needs_no_registry_call_the_second_time(site, monkeypatch):
    data, home, fingerprint = site
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter))
    assert (decision.action, decision.trigger, decision.fingerprint) == ("none", None, fingerprint)
    assert "nothing new" in decision.reason and counter.calls == []

    import ctpipe.components.lib.tracking

    def no_registry(*args, **kwargs):
        raise AssertionError("the champion should come from the watcher's cache")

    monkeypatch.setattr(ctpipe.components.lib.tracking, "get_alias_version", no_registry)
    again = check(data, home, FunctionStarter(counter))
    assert again.action == "none" and again.hashed_files == 0 and counter.calls == []


def test_new_partition_starts_exactly_one_run(site):
    data, home, fingerprint = site
    add_days(data, 8)
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter))
    assert (decision.action, decision.trigger) == ("run", "new_data")
    assert decision.fingerprint != fingerprint and decision.champion_fingerprint == fingerprint
    assert len(counter.calls) == 1 and counter.calls[0]["trigger"] == "new_data"
    assert counter.calls[0]["data_uri"] == str(data)
    assert set(decision.drift) >= {"tenure_months", "region"} and not decision.drifted_columns
    # A restarted watcher (new process state, same home) does not start it again.
    again = check(data, home, FunctionStarter(counter))
    assert again.action == "none" and "already started" in again.reason and len(counter.calls) == 1
    record = Ledger(home).get(decision.fingerprint)
    assert record["trigger"] == "new_data" and record["status"] == "succeeded"


def test_racing_watcher_threads_start_one_run(site):
    data, home, _ = site
    add_days(data, 8)
    counter = Counter(delay=0.3)
    decisions = []

    def watcher():
        decisions.append(check(data, home, FunctionStarter(counter)))

    threads = [threading.Thread(target=watcher) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(counter.calls) == 1
    assert sorted(d.action for d in decisions) == ["none", "none", "none", "run"]


def _process_watcher(data: str, home: str, out: str) -> None:
    def start(**kwargs):
        with open(out, "a") as f:
            f.write(json.dumps(kwargs) + "\n")
        time.sleep(0.2)

    check(Path(data), Path(home), FunctionStarter(start))


def test_racing_watcher_processes_start_one_run(site, tmp_path):
    data, home, _ = site
    add_days(data, 8)
    out = tmp_path / "starts.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_process_watcher, args=(str(data), str(home), str(out))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert len(out.read_text().splitlines()) == 1


def test_drifted_partitions_start_a_drift_run_with_a_report_naming_the_columns(site):
    data, home, _ = site
    add_days(data, 9, drift_from_day=7)
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter))
    assert (decision.action, decision.trigger) == ("run", "drift")
    assert {"tenure_months", "monthly_spend", "region", "device"} <= set(decision.drifted_columns)
    assert "plan" not in decision.drifted_columns  # the demo's drift leaves the plan mix alone
    assert decision.drift["region"]["drifted"] and decision.drift["region"]["value"] > decision.drift["region"]["threshold"]
    report = json.loads(Path(decision.drift_report).read_text())
    assert report["drifted"] and report["window"] == ["date=2026-01-09"]
    page = Path(decision.drift_report_html).read_text()
    assert page.count("<svg") == len(report["columns"]) and "tenure_months" in page and "<script" not in page
    assert [c["trigger"] for c in counter.calls] == ["drift"]
    assert Ledger(home).get(decision.fingerprint)["drift_report"] == decision.drift_report


def test_undrifted_new_data_starts_nothing_when_only_drift_triggers(site):
    data, home, _ = site
    add_days(data, 8)
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter), overrides=["watch.new_data=false"])
    assert decision.action == "none" and decision.trigger is None and counter.calls == []
    assert decision.drift and not any(c["drifted"] for c in decision.drift.values())
    assert "no drift" in decision.reason


def test_cool_down_holds_back_a_second_drift_run(site):
    data, home, _ = site
    overrides = ["watch.new_data=false", "watch.cool_down_seconds=3600"]
    counter = Counter()
    add_days(data, 8, drift_from_day=7)
    t0 = 1_900_000_000.0
    first = check(data, home, FunctionStarter(counter), overrides=overrides, now=t0)
    assert (first.action, first.trigger) == ("run", "drift")
    add_days(data, 9, drift_from_day=7)  # more drifted data: a new fingerprint
    held = check(data, home, FunctionStarter(counter), overrides=overrides, now=t0 + 600)
    assert held.action == "none" and "cool-down" in held.reason and held.drifted_columns
    later = check(data, home, FunctionStarter(counter), overrides=overrides, now=t0 + 3601)
    assert (later.action, later.trigger) == ("run", "drift")
    assert len(counter.calls) == 2


class BusyStarter:
    """Starts runs that stay active until released."""

    def __init__(self) -> None:
        self.started = 0
        self.busy = True

    def start(self, **kwargs):
        self.started += 1
        return {"backend": "test", "status": "running"}

    def is_active(self, record):
        return self.busy and record.get("status") == "running"


def test_no_second_run_while_the_first_is_running(site):
    data, home, _ = site
    starter = BusyStarter()
    add_days(data, 8)
    assert check(data, home, starter).action == "run"
    add_days(data, 9)
    waiting = check(data, home, starter)
    assert waiting.action == "none" and "still going" in waiting.reason and starter.started == 1
    assert Ledger(home).get(waiting.fingerprint) is None  # not claimed: a later check starts it
    starter.busy = False
    assert check(data, home, starter).action == "run" and starter.started == 2
    # Configured to allow concurrency, a busy run does not hold the next one back.
    starter.busy = True
    add_days(data, 10)
    assert check(data, home, starter, overrides=["watch.max_running=0"]).action == "run"


def test_no_champion_starts_the_first_run(site):
    data, home, _ = site
    counter = Counter()
    # A model name with no versions yet in this registry: nothing to compare with, so train one.
    decision = check(data, home, FunctionStarter(counter), overrides=["registry.model_name=brand-new-model"])
    assert (decision.action, decision.trigger, decision.champion_version) == ("run", "new_data", None)
    assert "first run" in decision.reason and len(counter.calls) == 1


def test_cli_dry_run_prints_the_decision_as_the_last_json_line(site):
    data, home, fingerprint = site
    add_days(data, 9, drift_from_day=8)
    cmd = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "watch", "--data", str(data), "--home", str(home), "--once", "--dry-run",
           "--json", "--set", "watch.min_rows=100"]
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert (line["action"], line["trigger"]) == ("run", "drift")
    assert line["fingerprint"] != fingerprint and line["dry_run"]
    assert set(line["drift"]["region"]) == {"statistic", "value", "threshold", "drifted"}
    assert Ledger(home).records() == []  # a dry run claims nothing
    # Back to the champion's data: nothing new, said quickly.
    shutil.rmtree(data / "date=2026-01-08")
    shutil.rmtree(data / "date=2026-01-09")
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    line = json.loads(out.stdout.strip().splitlines()[-1])
    assert (line["action"], line["trigger"], line["fingerprint"]) == ("none", None, fingerprint)
    assert "nothing new" in line["reason"]


def test_a_claim_never_started_blocks_only_for_the_grace_period(site):
    data, home, _ = site
    add_days(data, 8)
    fingerprint = data_state(str(data)).fingerprint
    ledger = Ledger(home)
    # Another watcher claimed it a moment ago and is starting it: not started twice.
    assert ledger.claim(fingerprint, {"trigger": "new_data"})
    counter = Counter()
    assert check(data, home, FunctionStarter(counter)).action == "none" and counter.calls == []
    # That watcher died before starting it: after the grace period the claim is released and started.
    ledger.update(fingerprint, claimed_at=time.time() - 3600)
    decision = check(data, home, FunctionStarter(counter))
    assert decision.action == "run" and len(counter.calls) == 1
    assert ledger.get(fingerprint)["status"] == "succeeded"


def test_watcher_on_kfp_starts_one_drift_run_and_records_its_report_in_mlflow(site, tmp_path, monkeypatch):
    from ctpipe.pipelines.compile import compile_pipeline
    from ctpipe.pipelines.deploy import upload as deploy
    from ctpipe.pipelines.triggers.start import KfpStarter
    from tests.fakes.kfp_api import FakeKfpServer

    data, home, _ = site
    add_days(data, 9, drift_from_day=7)
    package = str(compile_pipeline(tmp_path / "pipeline.yaml", None, [], None))
    monkeypatch.setenv("KFP_TOKEN", "t")
    with FakeKfpServer(token="t") as server:
        client = deploy.connect(server.url)
        deploy.deploy(client, package, version_name="v1")
        uri = local_tracking_uri(home)
        starter = KfpStarter(client, experiment="ctpipe", tracking_uri=uri)
        decision = check(data, home, starter)
        assert (decision.action, decision.trigger) == ("run", "drift")
        (run,) = server.state.runs.values()
        assert run["runtime_config"]["parameters"]["trigger"] == "drift"
        assert run["runtime_config"]["parameters"]["data_uri"] == str(data)
        assert decision.run["run_id"] == run["run_id"] and decision.run["status"] == "running"
        # Still running on KFP: another check starts nothing; once it ended, still nothing (same data).
        assert check(data, home, starter).action == "none"
        server.state.set_run_state(run["run_id"], "SUCCEEDED")
        assert check(data, home, starter).action == "none" and len(server.state.runs) == 1
    client_ml = mlflow.MlflowClient(tracking_uri=uri)
    (report_run,) = client_ml.search_runs(
        [client_ml.get_experiment_by_name("ctpipe").experiment_id],
        filter_string=f"tags.`ctpipe.drift_report_for` = '{run['run_id']}'",
    )
    names = sorted(a.path for a in client_ml.list_artifacts(report_run.info.run_id, "drift"))
    assert [Path(n).suffix for n in names] == [".html", ".json"]
    # The page went with the run (logged before it was started), with the digest of the page the watcher wrote:
    # the run's first step shows it in the KFP UI when the two match.
    parameters = run["runtime_config"]["parameters"]
    page = Path(decision.run["drift_report"]).with_suffix(".html")
    assert parameters["trigger_report_uri"] == f"runs:/{report_run.info.run_id}/{names[0]}"
    assert parameters["trigger_report_sha256"] == hashlib.sha256(page.read_bytes()).hexdigest()


def test_a_writers_output_in_progress_under_a_hidden_or_underscore_folder_is_not_data(site):
    """Spark, Hive and Hadoop write a partition under DATA/date=.../_temporary/... and move it into place
    on commit (others under .staging folders). The watcher fingerprinted those files, read a half-written
    one for drift and failed with 'Replace or remove the file' (or, without a champion, started a run on
    it), and validation would train on them. Folders named with '_' or '.' are skipped as files are."""
    data, home, fingerprint = site
    part = next(data.glob("date=*/part-0.parquet"))
    in_progress = data / "date=2099-01-01" / "_temporary" / "0" / "_temporary" / "attempt_1"
    in_progress.mkdir(parents=True)
    shutil.copy(part, in_progress / "part-00000.parquet")  # one task committed its file
    (in_progress / "part-00001.parquet").write_bytes(part.read_bytes()[:3000])  # one still writing
    (data / ".staging").mkdir()
    shutil.copy(part, data / ".staging" / "part-0.parquet")
    assert fingerprint_files(list_data_files(str(data))) == fingerprint
    counter = Counter()
    decision = check(data, home, FunctionStarter(counter))
    assert decision.action == "none" and decision.fingerprint == fingerprint and "nothing new" in decision.reason
    assert counter.calls == []


def record_champion_config(home: Path, config: dict) -> None:
    """Give the champion a lineage record (``ctpipe/lineage.json`` with its digest tag) holding ``config``."""
    from ctpipe.components.lib.tracking.lineage import LINEAGE_DIGEST_TAG, write_lineage

    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version_by_alias(MODEL, "champion")
    path = home / "tmp-lineage" / "lineage.json"
    digest = write_lineage(path, {"config": config})
    client.log_artifact(version.run_id, str(path), "ctpipe")
    client.set_model_version_tag(MODEL, version.version, LINEAGE_DIGEST_TAG, digest)


def test_a_run_takes_the_key_and_label_the_champion_was_trained_with_unless_given(site):
    """Issue 47: on the demo home the first new-data run failed unless given --set data.key=customer_id, though
    the champion records its key. The run the watcher starts now carries the champion's key and label, each
    only where the user gave none (``from_champion``), and retries carry them too (they live in the record)."""
    from ctpipe.pipelines.triggers.start import LocalStarter

    data, home, _ = site
    record_champion_config(home, {"data": {"key": "customer_id", "label": "churned"}})
    add_days(data, 8)
    dry = check(data, home, from_champion=("data.key", "data.label"))
    assert dry.champion_settings == ['data.key="customer_id"', 'data.label="churned"']
    assert 'data.key="customer_id"' in dry.to_text()

    calls = Counter()
    decision = check(data, home, FunctionStarter(calls), from_champion=("data.label",))
    assert decision.action == "run" and decision.champion_settings == ['data.label="churned"']
    record_path = Ledger(home).path(decision.fingerprint)
    command = LocalStarter(home, overrides=["train.max_steps=5"]).command(
        trigger="new_data", data_uri=str(data), record_path=record_path)
    sets = [command[i + 1] for i, arg in enumerate(command) if arg == "--set"]
    assert sets == ['data.label="churned"', "train.max_steps=5"]  # the user's own settings last: they win


def test_the_watch_command_takes_from_the_champion_only_what_the_user_did_not_set(tmp_path):
    from ctpipe.components.run_config.resolve import resolve_layers
    from ctpipe.pipelines.cli.commands.watch import not_given

    assert not_given(resolve_layers(settings=["data.key=id"])) == ("data.label",)
    (tmp_path / "my.yaml").write_text("data:\n  label: y\n")
    assert not_given(resolve_layers(file=tmp_path / "my.yaml")) == ("data.key",)
    assert not_given(resolve_layers()) == ("data.key", "data.label")
