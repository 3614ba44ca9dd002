"""`ctpipe gc`'s bounded version policy, hard deletes and kfp.local cache pruning, on a real MLflow SQLite store."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

import mlflow
import pytest
from kfp import dsl
from kfp.local.cache import LocalCache

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.config.retention_section import RetentionConfig
from ctpipe.components.lib.errors import ConfigError, UserError
from ctpipe.components.lib.registry.lock import RegistryBusyError
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, HISTORY_TAG, STACK_TAG
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.retention.gc import collect_garbage
from ctpipe.pipelines.retention.purge import prune_kfp_cache
from ctpipe.pipelines.retention.versions import retire_versions
from tests.fixtures.registry import run_gone

MODEL = "ctpipe-classifier"
POLICY = RetentionConfig(keep_last_runs=1, keep_versions=3, keep_champions=3)


@pytest.fixture
def registry_home(tmp_path):
    """Eleven versions of the model, each from a finished run with artifacts (a cluster's runs: no local folder).

    Version 2 holds the `challenger` alias, 5 is champion with the stack [1, 3, 4, 5] and the history
    1, 3, 4, 5; version 6's run holds the history's older page; version 7's run is still running."""
    home = tmp_path / "home"
    home.mkdir()
    uri = local_tracking_uri(home)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment(
        "ctpipe", artifact_location=(home / "mlartifacts" / "ctpipe").as_uri()
    )
    client.create_registered_model(MODEL)
    runs = {}
    for n in range(1, 12):
        run_id = client.create_run(
            experiment, start_time=int((time.time() - (20 - n) * 3600) * 1000)
        ).info.run_id
        client.log_text(run_id, f"model {n}", "ctpipe/model.pt")
        if n != 7:
            client.set_terminated(run_id, "FINISHED")
        # Registered completely by ctpipe: a rollback applies a promotion's checks to its target (issue 46).
        client.create_model_version(MODEL, f"runs:/{run_id}/model", run_id=run_id,
                                    tags={"ctpipe.data_fingerprint": f"fp{n}", "ctpipe.blessed": "true",
                                          COMPLETE_TAG: "complete"})  # fmt: skip
        runs[str(n)] = run_id
    client.log_text(
        runs["6"],
        json.dumps({"entries": [{"version": "0"}], "older": None}),
        "ctpipe-registry/history-a.json",
    )
    history = {"entries": [{"version": v, "previous": p, "kind": "manual", "by": "me", "reason": f"why {v}"}
                           for v, p in (("1", None), ("3", "1"), ("4", "3"), ("5", "4"))],
               "older": f"runs:/{runs['6']}/ctpipe-registry/history-a.json"}  # fmt: skip
    client.set_registered_model_tag(MODEL, HISTORY_TAG, json.dumps(history))
    client.set_registered_model_tag(MODEL, STACK_TAG, json.dumps(["1", "3", "4", "5"]))
    client.set_registered_model_alias(MODEL, "champion", "5")
    client.set_registered_model_alias(MODEL, "challenger", "2")
    return home, uri, client, runs


def _registered(client) -> list[str]:
    return sorted((str(v.version) for v in client.search_model_versions(f"name = '{MODEL}'")), key=int)


def _tag_rows(home: Path, version: str) -> int:
    with sqlite3.connect(home / "mlflow.db") as db:
        return db.execute(
            "SELECT COUNT(*) FROM model_version_tags WHERE name = ? AND version = ?", (MODEL, int(version))
        ).fetchone()[0]


def test_versions_outside_the_bounds_leave_the_registry_with_their_runs_and_rows(registry_home, capsys):
    home, uri, client, runs = registry_home
    dry = collect_garbage(home, POLICY, RegistryConfig(), uri, dry_run=True)
    assert dry.model_versions_deleted == ["1", "6", "8"] and len(_registered(client)) == 11
    report = collect_garbage(home, POLICY, RegistryConfig(), uri)
    # 1: out of the trimmed stack, not among the last 3 champions, not newest; 6 and 8: older than the newest 3.
    # Kept: 2 (an alias), 3, 4, 5 (stack and last champions), 7 (running), 9-11.
    assert report.model_versions_deleted == ["1", "6", "8"]
    assert _registered(client) == ["2", "3", "4", "5", "7", "9", "10", "11"]
    for gone in ("1", "8"):
        assert run_gone(client, runs[gone]) and not (home / "mlartifacts" / "ctpipe" / runs[gone]).exists()
        assert _tag_rows(home, gone) == 0  # MLflow's delete keeps them; gc removes them for good
    assert _tag_rows(home, "9") == 3
    # Version 6's run holds the history's older page: the run stays with that page alone.
    assert report.history_runs_stripped == [runs["6"]]
    assert [a.path for a in client.list_artifacts(runs["6"])] == ["ctpipe-registry"]
    assert client.get_run(runs["7"]).info.status == "RUNNING"
    # The stack is bounded to keep_champions; the history still tells of version 1.
    registry = Registry(uri, RegistryConfig())
    assert registry.champion_stack() == ["3", "4", "5"]
    assert [e["version"] for e in registry.champion_history()] == ["1", "3", "4", "5"]
    assert registry.champion_history_pages(5) == [[{"version": "0"}]]
    capsys.readouterr()
    assert main(["models", "history", "--home", str(home), "--pages", "1", "--json"]) == 0
    moves = json.loads(capsys.readouterr().out)
    assert [m["version"] for m in moves] == ["0", "1", "3", "4", "5"] and moves[1]["reason"] == "why 1"
    again = collect_garbage(home, POLICY, RegistryConfig(), uri)
    assert (again.model_versions_deleted, again.mlflow_runs_purged, again.version_tags_purged) == ([], [], 0)
    assert again.history_runs_stripped == [] and registry.champion_history_pages(5) == [[{"version": "0"}]]


def test_rollback_works_within_the_bound_and_stops_at_its_end(registry_home):
    home, uri, client, runs = registry_home
    collect_garbage(home, POLICY, RegistryConfig(), uri)
    registry = Registry(uri, RegistryConfig())
    assert registry.rollback(reason="bad", by="oncall").champion == "4"
    assert registry.rollback(reason="bad too", by="oncall").champion == "3"
    with pytest.raises(UserError, match="no previous champion"):
        registry.rollback(reason="and again", by="oncall")
    # The champions a rollback moved to stay registered through the next gc.
    collect_garbage(home, POLICY, RegistryConfig(), uri)
    assert {"3", "4", "5"} <= set(_registered(client))


def test_no_version_is_deleted_while_a_promotion_holds_the_lock(registry_home):
    home, uri, client, runs = registry_home
    other = Registry(uri, RegistryConfig())
    with other.locked():
        with pytest.raises(RegistryBusyError):
            retire_versions(uri, RegistryConfig(), POLICY, set(), dry_run=False, lock_wait_seconds=0.5)
    assert len(_registered(client)) == 11 and other.champion_stack() == ["1", "3", "4", "5"]


def test_the_version_bounds_are_checked():
    with pytest.raises(ConfigError, match="retention.keep_versions"):
        RetentionConfig(keep_versions=0)
    with pytest.raises(ConfigError, match="retention.keep_champions"):
        RetentionConfig(keep_champions=1)


def _cache_entry(cache: LocalCache, key: str, uri: str | None) -> None:
    outputs = {"n": 3}
    if uri is not None:
        artifact = dsl.Artifact(name="out", uri=uri)
        outputs["out"] = artifact
    cache.put(key, outputs)


def test_kfp_cache_entries_of_deleted_outputs_go_and_the_kept_runs_entries_stay_hits(tmp_path):
    root = tmp_path / "pipeline_root"
    kept_output = root / "job-newest" / "select-checkpoint" / "model"
    kept_output.mkdir(parents=True)
    cache = LocalCache(str(root / ".kfp_cache"))
    _cache_entry(cache, "newest", str(kept_output))
    _cache_entry(cache, "deleted-run", str(root / "job-deleted" / "select-checkpoint" / "model"))
    _cache_entry(cache, "params-old", None)
    _cache_entry(cache, "params-new", None)
    (root / ".kfp_cache" / ".kfp_cache_abc.tmp").write_text("{")  # a killed write
    old = time.time() - 30 * 86_400
    for name in ("params-old.json", ".kfp_cache_abc.tmp", "newest.json"):
        os.utime(root / ".kfp_cache" / name, (old, old))
    deleted = prune_kfp_cache(root, time.time() - 7 * 86_400, dry_run=False)
    assert sorted(deleted) == [".kfp_cache_abc.tmp", "deleted-run.json", "params-old.json"]
    assert cache.get("newest") is not None and cache.get("params-new") == {"n": 3}
    assert sorted(p.name for p in (root / ".kfp_cache").iterdir()) == ["newest.json", "params-new.json"]
