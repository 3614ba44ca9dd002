"""`ctpipe gc` on a home of real run folders, checkpoints and MLflow runs on SQLite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.retention.gc import collect_garbage
from tests.fixtures.registry import run_gone

DAY = 86_400


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _make_run(home: Path, client, experiment: str, n: int, status: str | None, *, age_days: float, pid: int) -> dict:
    """A run as a local run leaves it: its folder (summary unless killed), pipeline-root outputs with checkpoints
    and an export, an MLflow run with an artifact."""
    run = client.create_run(experiment)
    run_id = run.info.run_id
    client.log_text(run_id, "model bytes", "ctpipe/model.pt")
    if status is not None:
        client.set_terminated(run_id, "FINISHED" if status == "succeeded" else "FAILED")
    # KFP's local runner names the pipeline-root folder after the job; the pipeline run id is another name.
    job = f"ctpipe-continuous-training-2026-01-01-00-00-{n:02d}-000000"
    root = home / "pipeline_root" / job
    folder = home / "runs" / f"20260101-{n:06d}-{pid}"
    (folder / "steps").mkdir(parents=True)
    (folder / "steps" / "prepare_run.json").write_text(
        json.dumps({"status": "passed", "result": {"pipeline_run_id": str(1000 + n), "mlflow_run_id": run_id}})
    )
    (folder / "steps" / "validate_data.json").write_text(
        json.dumps({"status": "passed", "result": {"snapshot": str(root / "validate-data" / "snapshot")}})
    )
    if status is not None:
        (folder / "summary.json").write_text(json.dumps({"status": status, "run_id": str(1000 + n), "mlflow_run_id": run_id}))
    (root / "train" / "checkpoints" / "step_20").mkdir(parents=True)
    (root / "train" / "checkpoints" / "step_20" / "shard.distcp").write_bytes(b"x" * 4096)
    (root / "select_checkpoint" / "model").mkdir(parents=True)
    (root / "select_checkpoint" / "model" / "model.pt").write_bytes(b"m" * 512)
    then = time.time() - age_days * DAY
    for path in [*folder.rglob("*"), folder, *root.rglob("*"), root]:
        os.utime(path, (then, then))
    return {"folder": folder, "root": root, "mlflow": run_id}


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    uri = local_tracking_uri(home)
    home.mkdir()
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("ctpipe", artifact_location=(home / "mlartifacts" / "ctpipe").as_uri())
    dead = _dead_pid()
    runs = {
        "registered_old": _make_run(home, client, experiment, 1, "succeeded", age_days=60, pid=dead),
        "registered_other": _make_run(home, client, experiment, 0, "succeeded", age_days=55, pid=dead),
        "old": _make_run(home, client, experiment, 2, "succeeded", age_days=50, pid=dead),
        "failed_old": _make_run(home, client, experiment, 3, "failed", age_days=40, pid=dead),
        "killed": _make_run(home, client, experiment, 4, None, age_days=3, pid=dead),
        "failed_recent": _make_run(home, client, experiment, 5, "failed", age_days=2, pid=dead),
        "newest_a": _make_run(home, client, experiment, 6, "succeeded", age_days=1, pid=dead),
        "newest_b": _make_run(home, client, experiment, 7, "succeeded", age_days=0, pid=dead),
        "running": _make_run(home, client, experiment, 8, None, age_days=0, pid=os.getpid()),
    }
    client.create_registered_model("ctpipe-classifier")
    client.create_model_version("ctpipe-classifier", f"runs:/{runs['registered_old']['mlflow']}/model",
                                run_id=runs["registered_old"]["mlflow"])
    client.create_model_version("ctpipe-classifier", f"runs:/{runs['registered_other']['mlflow']}/model",
                                run_id=runs["registered_other"]["mlflow"])
    client.set_registered_model_alias("ctpipe-classifier", "champion", "1")
    (home / "pipeline_root" / "orphan-from-a-deleted-run").mkdir()
    os.utime(home / "pipeline_root" / "orphan-from-a-deleted-run", (time.time() - 30 * DAY,) * 2)
    return home, uri, client, runs


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_gc_keeps_what_the_policy_names_and_deletes_the_rest(home):
    home, uri, client, runs = home
    policy = RetentionConfig(keep_last_runs=3, keep_failed_days=7)
    before = _bytes(home)
    dry = collect_garbage(home, policy, RegistryConfig(), uri, dry_run=True)
    assert _bytes(home) == before and client.get_run(runs["killed"]["mlflow"]).info.status == "RUNNING"
    report = collect_garbage(home, policy, RegistryConfig(), uri)
    assert (dry.runs_deleted, dry.checkpoints_deleted, dry.bytes_freed) == (
        report.runs_deleted, report.checkpoints_deleted, report.bytes_freed)
    assert report.bytes_freed > 0 and _bytes(home) < before

    def kept(name: str) -> bool:
        return runs[name]["folder"].exists() and runs[name]["root"].exists()

    def checkpoints(name: str) -> bool:
        return (runs[name]["root"] / "train" / "checkpoints").exists()

    # Deleted whole: an old unregistered run, an old failure, and the orphaned pipeline-root folder.
    for name in ("old", "failed_old"):
        assert not runs[name]["folder"].exists() and not runs[name]["root"].exists()
        assert run_gone(client, runs[name]["mlflow"])
        assert not (home / "mlartifacts" / "ctpipe" / runs[name]["mlflow"]).exists()
    assert not (home / "pipeline_root" / "orphan-from-a-deleted-run").exists()
    # Every registered version's MLflow run stays with its artifacts; the champion's local folders stay too,
    # less the checkpoints (its export stays); another registered version's local folders go.
    assert not runs["registered_other"]["folder"].exists() and not runs["registered_other"]["root"].exists()
    assert client.get_run(runs["registered_other"]["mlflow"]).info.lifecycle_stage == "active"
    assert [a.path for a in client.list_artifacts(runs["registered_other"]["mlflow"], "ctpipe")] == ["ctpipe/model.pt"]
    assert kept("registered_old") and not checkpoints("registered_old")
    assert (runs["registered_old"]["root"] / "select_checkpoint" / "model" / "model.pt").exists()
    assert [a.path for a in client.list_artifacts(runs["registered_old"]["mlflow"], "ctpipe")] == ["ctpipe/model.pt"]
    # The newest runs stay; finished ones lose their checkpoints, the running one keeps them.
    assert kept("newest_a") and kept("newest_b") and kept("running")
    assert not checkpoints("newest_a") and checkpoints("running")
    # Recent failures (a killed run is one) stay whole for a retry to resume; the killed one is marked KILLED.
    assert kept("failed_recent") and checkpoints("failed_recent") and kept("killed") and checkpoints("killed")
    assert client.get_run(runs["killed"]["mlflow"]).info.status == "KILLED"
    assert client.get_run(runs["running"]["mlflow"]).info.status == "RUNNING"
    # Idempotent: a second pass finds nothing more to delete.
    again = collect_garbage(home, policy, RegistryConfig(), uri)
    assert (again.runs_deleted, again.checkpoints_deleted, again.mlflow_runs_deleted) == ([], [], [])


def test_failed_runs_go_after_keep_failed_days(home):
    home, uri, _, runs = home
    policy = RetentionConfig(keep_last_runs=2, keep_failed_days=1)
    collect_garbage(home, policy, RegistryConfig(), uri)
    assert not runs["failed_recent"]["folder"].exists() and not runs["killed"]["folder"].exists()


def test_an_mlflow_run_running_for_days_without_a_local_process_is_marked_killed(home):
    # A cluster run whose pod was killed leaves no local folder: its MLflow run would stay RUNNING for ever.
    home, uri, client, runs = home
    experiment = client.get_experiment_by_name("ctpipe").experiment_id
    orphan = client.create_run(experiment, start_time=int((time.time() - 3 * DAY) * 1000)).info.run_id
    collect_garbage(home, RetentionConfig(killed_after_hours=48), RegistryConfig(), uri, dry_run=False)
    assert client.get_run(orphan).info.status == "KILLED"
    assert client.get_run(runs["running"]["mlflow"]).info.status == "RUNNING"


def test_ctpipe_gc_prints_its_report_and_refuses_a_bad_policy(home, capsys):
    home, _, _, runs = home
    assert main(["gc", "--home", str(home), "--dry-run", "--set", "retention.keep_last_runs=3"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["dry_run"] and runs["old"]["folder"].name in report["runs_deleted"]
    assert runs["old"]["folder"].exists()
    assert main(["gc", "--home", str(home), "--set", "retention.keep_last_runs=0"]) == 2
    assert "retention.keep_last_runs" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="keep_failed_days"):
        RetentionConfig(keep_failed_days=-1)


def test_mlflow_runs_of_cluster_runs_follow_the_same_policy(tmp_path):
    # A cluster's runs leave no folder in the watcher's home: their MLflow runs are pruned on their own.
    home = tmp_path / "home"
    home.mkdir()
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("ctpipe", artifact_location=(home / "mlartifacts" / "ctpipe").as_uri())
    ids = []
    for i in range(6):
        run_id = client.create_run(experiment, start_time=int((time.time() - (10 - i) * DAY) * 1000)).info.run_id
        client.log_text(run_id, "x" * 1000, "ctpipe/model.pt")
        client.set_terminated(run_id, "FINISHED" if i != 1 else "FAILED", end_time=int((time.time() - (10 - i) * DAY) * 1000))
        ids.append(run_id)
    client.create_registered_model("ctpipe-classifier")
    client.create_model_version("ctpipe-classifier", f"runs:/{ids[0]}/model", run_id=ids[0])
    report = collect_garbage(home, RetentionConfig(keep_last_runs=2, keep_failed_days=7), RegistryConfig(), uri)
    assert sorted(report.mlflow_runs_deleted) == sorted([ids[1], ids[2], ids[3]])  # the failure is 9 days old
    assert sorted(report.mlflow_runs_purged) == sorted(report.mlflow_runs_deleted)
    for run_id in ids:
        deleted = run_id in report.mlflow_runs_deleted
        assert run_gone(client, run_id) == deleted
        assert (home / "mlartifacts" / "ctpipe" / run_id).exists() != deleted


def test_the_champions_lineage_keeps_its_folders_older_champions_only_their_mlflow_runs(tmp_path):
    # A rollback stack of 100 versions would keep 100 runs' folders for months; a rollback needs the MLflow run.
    home = tmp_path / "home"
    home.mkdir()
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("ctpipe", artifact_location=(home / "mlartifacts" / "ctpipe").as_uri())
    dead = _dead_pid()
    runs = [_make_run(home, client, experiment, n, "succeeded", age_days=30 - n, pid=dead) for n in (1, 2, 3, 4)]
    client.create_registered_model("ctpipe-classifier", tags={"ctpipe.champion_stack": json.dumps(["1", "2", "3"])})
    for run in runs[:3]:
        client.create_model_version("ctpipe-classifier", f"runs:/{run['mlflow']}/model", run_id=run["mlflow"])
    client.set_registered_model_alias("ctpipe-classifier", "champion", "3")
    collect_garbage(home, RetentionConfig(keep_last_runs=1), RegistryConfig(), uri)
    assert [r["folder"].exists() for r in runs] == [False, True, True, True]  # 2: what a rollback restores
    assert [client.get_run(r["mlflow"]).info.lifecycle_stage for r in runs[:3]] == ["active"] * 3


def test_a_failed_run_whose_mlflow_run_could_not_be_ended_is_ended_failed_by_the_next_gc(home):
    # The SQLite store on the full disk too: the step's summary says failed, its MLflow run stayed RUNNING.
    home, uri, client, _ = home
    experiment = client.get_experiment_by_name("ctpipe").experiment_id
    run = _make_run(home, client, experiment, 9, None, age_days=0.1, pid=_dead_pid())
    (run["folder"] / "summary.json").write_text(json.dumps({"status": "failed", "mlflow_run_id": run["mlflow"]}))
    report = collect_garbage(home, RetentionConfig(), RegistryConfig(), uri)
    assert client.get_run(run["mlflow"]).info.status == "FAILED" and run["mlflow"] in report.mlflow_runs_failed
    assert run["folder"].exists() and (run["root"] / "train" / "checkpoints").exists()  # a recent failure: whole


def test_the_newest_finished_run_keeps_its_checkpoints_and_cache_entries_so_a_rerun_reuses_train(home):
    # Issue 32: a rerun on unchanged data reuses validate/sanity/train/select from kfp.local's cache; train's
    # entry names the checkpoints folder, so deleting the newest run's checkpoints would make it a miss.
    from kfp import dsl
    from kfp.local.cache import LocalCache

    home, uri, _, runs = home
    cache = LocalCache(str(home / "pipeline_root" / ".kfp_cache"))
    for name in ("newest_b", "newest_a", "old"):
        for step, output in (("train", "train/checkpoints"), ("select", "select_checkpoint/model")):
            cache.put(f"{name}-{step}", {"out": dsl.Artifact(name="out", uri=str(runs[name]["root"] / output))})
    report = collect_garbage(home, RetentionConfig(keep_last_runs=3), RegistryConfig(), uri)
    assert (runs["newest_b"]["root"] / "train" / "checkpoints").exists()
    assert not (runs["newest_a"]["root"] / "train" / "checkpoints").exists()
    assert all(cache.get(f"newest_b-{step}") is not None for step in ("train", "select"))
    assert cache.get("newest_a-select") is not None
    assert sorted(report.cache_entries_deleted) == ["newest_a-train.json", "old-select.json", "old-train.json"]
    assert sorted(p.name for p in (home / "pipeline_root" / ".kfp_cache").iterdir()) == [
        "newest_a-select.json", "newest_b-select.json", "newest_b-train.json"]  # fmt: skip


def test_a_tuned_runs_trial_runs_follow_their_parent(tmp_path):
    # A tune step's trials are child runs of the training run: they neither crowd the parent runs out of the newest
    # keep_last_runs nor outlive the parent they belong to.
    home = tmp_path / "home"
    home.mkdir()
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("ctpipe", artifact_location=(home / "mlartifacts" / "ctpipe").as_uri())
    parents, children = [], {}
    for i in range(3):
        started = int((time.time() - (10 - i) * DAY) * 1000)
        parent = client.create_run(experiment, start_time=started).info.run_id
        client.set_terminated(parent, "FINISHED", end_time=started)
        parents.append(parent)
        children[parent] = []
        for trial in range(4):  # started after their parent: the newest runs of the experiment
            child = client.create_run(experiment, start_time=started + 1000 + trial,
                                      tags={"mlflow.parentRunId": parent}).info.run_id
            client.set_terminated(child, "FINISHED", end_time=started + 2000)
            children[parent].append(child)
    report = collect_garbage(home, RetentionConfig(keep_last_runs=2, keep_failed_days=7), RegistryConfig(), uri)
    assert sorted(report.mlflow_runs_deleted) == sorted([parents[0], *children[parents[0]]])
    for parent in parents[1:]:
        assert not any(run_gone(client, run) for run in [parent, *children[parent]])
