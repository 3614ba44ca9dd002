"""One commit point per promotion, and registry state that stays within MLflow's limits for ever.

Real MLflow on SQLite; versions are made as ctpipe's registration leaves them (a run, the completion tag), without
training a model, so that dozens of promotions stay fast.
"""

from __future__ import annotations

import json
import random

import mlflow
from mlflow.exceptions import MlflowException

from ctpipe.components.lib.config import RegistryConfig
from ctpipe.components.lib.registry.history import (
    MAX_HISTORY,
    MAX_REGISTRY_TAG_BYTES,
    HistoryTag,
    append_entry,
    checked_tag,
)
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, HISTORY_TAG, promotion_record
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError
from ctpipe.pipelines.cli.main import main

LONG_REASON = ("canary looked fine on the EU slice; rolling forward after the incident review. " * 30)[:2000]


def _home_with_versions(home, count: int) -> Registry:
    """A home whose model has ``count`` complete versions, each with its own MLflow run (artifacts beside the db)."""
    uri = local_tracking_uri(home)
    home.mkdir(parents=True, exist_ok=True)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    experiment = client.create_experiment("ctpipe", artifact_location=(home / "mlartifacts").as_uri())
    registry = Registry(uri, RegistryConfig(model_name="m", retries=0, retry_backoff_seconds=0.0))
    registry.ensure_registered_model()
    for _ in range(count):
        run = client.create_run(experiment)
        client.set_terminated(run.info.run_id)
        client.create_model_version("m", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id,
                                    tags={COMPLETE_TAG: "complete"})
    return registry


def _largest_tag_bytes(registry: Registry) -> int:
    sizes = [len(v.encode()) for v in registry.model_tags().values()]
    sizes += [len(v.encode()) for mv in registry.versions() for v in (mv.tags or {}).values()]
    return max(sizes)


def _all_history(registry: Registry) -> list[dict]:
    pages = registry.champion_history_pages(max_pages=10_000)
    return [e for page in reversed(pages) for e in page] + registry.champion_history()


def test_a_100k_character_reason_is_kept_whole_and_clipped_in_the_registry(tmp_path, capsys):
    # Before: the reason went whole into the history tag; MLflow refused it after the alias had moved (exit 1,
    # a traceback, the champion changed).
    home = tmp_path / "home"
    registry = _home_with_versions(home, 2)
    reason = "x" * 99_000 + " the end"
    assert main(["models", "promote", "1", "--reason", "first", "--home", str(home), "--model-name", "m"]) == 0
    code = main(["models", "promote", "2", "--reason", reason, "--home", str(home), "--model-name", "m"])
    out, err = capsys.readouterr()
    assert code == 0 and out.strip().splitlines()[-1] == "2" and len(err) < 2_000
    assert registry.alias_version("champion") == "2"
    tags = registry.get_version("2").tags
    promotion = promotion_record(tags)
    pointer = promotion["reason_uri"]
    assert registry.read_record(pointer) == reason  # the whole text, where the clipped one points
    assert len(promotion["reason"]) <= 500 and pointer in promotion["reason"]
    assert registry.champion_history()[-1]["reason_uri"] == pointer
    assert _largest_tag_bytes(registry) < MAX_REGISTRY_TAG_BYTES


def test_a_reason_nobody_meant_to_type_is_refused_before_the_alias_moves(tmp_path, capsys):
    home = tmp_path / "home"
    registry = _home_with_versions(home, 2)
    assert main(["models", "promote", "1", "--reason", "first", "--home", str(home), "--model-name", "m"]) == 0
    code = main(["models", "promote", "2", "--reason", "y" * 1_000_001, "--home", str(home), "--model-name", "m"])
    assert code == 2 and "1,000,001 characters" in capsys.readouterr().err
    assert registry.alias_version("champion") == "1" and len(registry.champion_history()) == 1


def test_sixty_promotions_with_long_reasons_all_succeed_within_the_limit_and_page_their_history(tmp_path, capsys):
    # Before: from about the 48th promotion every one raised "'value' exceeds the maximum length" after the alias
    # had moved, and the history never shrank again.
    registry = _home_with_versions(tmp_path / "home", 3)
    expected = []
    for i in range(60):
        if i % 7 == 6:
            outcome = registry.rollback(reason=f"{i}: " + LONG_REASON, by="ops")
            kind = "rollback"
        else:
            target = str(1 + i % 3) if registry.alias_version("champion") != str(1 + i % 3) else str(1 + (i + 1) % 3)
            outcome = registry.promote_manual(target, reason=f"{i}: " + LONG_REASON, by="alice")
            kind = "manual"
        assert outcome.promoted and registry.alias_version("champion") == outcome.champion
        expected.append((outcome.champion, kind, f"{i}: "))
        assert _largest_tag_bytes(registry) < MAX_REGISTRY_TAG_BYTES
    assert len(registry.champion_history()) <= MAX_HISTORY
    history = _all_history(registry)  # every promotion, oldest first, none twice, across the pages
    assert [(e["version"], e["kind"], e["reason"][: len(p)]) for e, (_, _, p) in zip(history, expected, strict=True)] \
        == expected
    assert all(registry.read_record(e["reason_uri"]).endswith(LONG_REASON) for e in history[-3:])
    home = tmp_path / "home"
    assert main(["models", "history", "--home", str(home), "--model-name", "m", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == len(registry.champion_history())
    assert main(["models", "history", "--pages", "10", "--home", str(home), "--model-name", "m", "--json"]) == 0
    assert [e["version"] for e in json.loads(capsys.readouterr().out)] == [e["version"] for e in history]


def test_a_promotion_that_reports_failure_never_moved_the_alias(tmp_path, monkeypatch):
    # 50+ promotions, each with one write failing at a random point (MLflow down past the retry budget):
    # whatever the point, an exception means the alias did not move, and success means it did; every
    # move is in the history once the registry answers again.
    registry = _home_with_versions(tmp_path / "home", 3)
    rng = random.Random(0)
    calls = {"n": 0, "fail_at": -1}
    targets = [
        ("set_model_version_tag", mlflow.MlflowClient.set_model_version_tag),
        ("set_registered_model_alias", mlflow.MlflowClient.set_registered_model_alias),
        ("set_registered_model_tag", mlflow.MlflowClient.set_registered_model_tag),
        ("log_text", mlflow.MlflowClient.log_text),
    ]

    def failing(real):
        def call(self, *args, **kwargs):
            calls["n"] += 1
            if calls["n"] == calls["fail_at"]:
                raise ConnectionError("connection reset by peer")
            return real(self, *args, **kwargs)

        return call

    for name, real in targets:
        monkeypatch.setattr(mlflow.MlflowClient, name, failing(real))
    registry.promote_manual("1", reason="start", by="alice")
    moves = 1
    for i in range(54):
        before = registry.alias_version("champion")
        target = str(1 + (int(before) % 3))
        calls["n"], calls["fail_at"] = 0, rng.randint(1, 12)
        try:
            outcome = registry.promote_manual(target, reason=f"{i}: " + LONG_REASON, by="alice")
        except (RegistryUnavailableError, MlflowException):
            assert registry.alias_version("champion") == before
            continue
        assert outcome.promoted and registry.alias_version("champion") == target
        moves += 1
    calls["fail_at"] = -1
    registry.rollback(reason="back", by="ops")  # completes any record a failure after the alias left behind
    history = _all_history(registry)
    assert len(history) == moves + 1
    assert all(a["version"] == b["previous"] for a, b in zip(history, history[1:], strict=False))  # no move missing
    assert history[-1]["version"] == registry.alias_version("champion")
    assert _largest_tag_bytes(registry) < MAX_REGISTRY_TAG_BYTES


def test_ten_thousand_history_appends_never_pass_the_tag_limit_and_lose_nothing():
    # The same function the registry appends with, worst-case entries (multi-byte reasons, a long --by);
    # pages are kept in a dict standing for the runs' artifacts.
    tag, pages, largest = HistoryTag(entries=[]), {}, 0
    for i in range(10_000):
        entry = {"version": str(i), "previous": str(i - 1), "kind": "manual", "by": "é" * 10_000,
                 "reason": f"{i} " + "€" * 2_000, "at": "2026-11-27T00:00:00Z", "reason_uri": f"runs:/r{i}/x.txt"}
        update = append_entry(tag, entry, page_file=f"p{i}.json", page_uri=f"runs:/r/p{i}.json")
        value = checked_tag(HISTORY_TAG, update.tag.to_json())
        largest = max(largest, len(value.encode()))
        if update.page is not None:
            pages[f"runs:/r/p{i}.json"] = json.dumps(update.page)
        tag = HistoryTag.parse(value)
    assert largest < MAX_REGISTRY_TAG_BYTES and len(tag.entries) <= MAX_HISTORY
    seen, older = [e["version"] for e in tag.entries], tag.older
    while older:
        page = json.loads(pages[older])
        seen = [e["version"] for e in page["entries"]] + seen
        older = page["older"]
    assert seen == [str(i) for i in range(10_000)]
    assert all(len(json.loads(p)["entries"]) <= MAX_HISTORY for p in pages.values())


def test_a_history_tag_written_before_the_bounds_is_brought_within_them_by_the_next_promotion():
    # Today's main writes up to 50 entries with whole reasons: about 100 KB, the limit. The next append pages
    # the oldest out whole and clips what stays.
    legacy = [{"version": str(i), "previous": str(i - 1), "kind": "manual", "by": "a", "reason": f"{i} " + "r" * 1_990,
               "at": "2026-01-01T00:00:00Z"} for i in range(50)]
    update = append_entry(HistoryTag.parse(json.dumps(legacy)),
                          {"version": "50", "previous": "49", "kind": "auto", "by": "p", "reason": "ok", "at": "z"},
                          page_file="p.json", page_uri="runs:/r/p.json")
    assert len(checked_tag(HISTORY_TAG, update.tag.to_json()).encode()) < MAX_REGISTRY_TAG_BYTES // 4
    assert [e["reason"] for e in update.page["entries"]] == [e["reason"] for e in legacy[:25]]
    assert [e["version"] for e in update.tag.entries] == [str(i) for i in range(25, 51)]
