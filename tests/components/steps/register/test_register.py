"""register_candidate on MLflow/SQLite: lineage tags, artifacts, pyfunc model, idempotency, compare-and-set."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pytest
import torch

from ctpipe.components.lib.config import Threshold
from ctpipe.components.lib.registry.catalog import show_version
from ctpipe.components.lib.registry.history import MAX_REASON_CHARS_IN_TAG
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import PROMOTION_TAG, promotion_record
from ctpipe.components.lib.tracking import local_tracking_uri, use_tracking
from ctpipe.components.lib.tracking.lineage import (
    LINEAGE_DIGEST_TAG,
    LINEAGE_FIELDS,
    TRIGGER_REASON_TAG,
    LineageError,
    write_lineage,
)
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.components.steps.register.version_record import CLIPPED, MAX_TAG_CHARS, MAX_TAGS, VERSION_TAGS
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("reg")
    snap = make_snapshot(root)
    return {
        "snap": snap,
        "a": make_model(snap, root / "a.pt", steps=80, seed=0),
        "b": make_model(snap, root / "b.pt", steps=120, seed=1),
        "c": make_model(snap, root / "c.pt", steps=100, seed=2),
    }


def _cycle(models, home, name, pipeline_run_id, config):
    """evaluate + register one candidate as a pipeline run would."""
    uri = local_tracking_uri(home)
    run_id = make_run(uri, config, pipeline_run_id)
    blessing = home / f"{pipeline_run_id}-blessing.json"
    card = home / f"{pipeline_run_id}-card.md"
    evaluate_candidate(
        str(models[name]),
        str(models["snap"]),
        config,
        tracking_uri=uri,
        mlflow_run_id=run_id,
        blessing_path=str(blessing),
        card_path=str(card),
    )
    return (
        run_id,
        blessing,
        lambda: register_candidate(
            str(models[name]),
            str(models["snap"]),
            str(blessing),
            config,
            tracking_uri=uri,
            mlflow_run_id=run_id,
            pipeline_run_id=pipeline_run_id,
            trigger="new_data",
            reports={"model_card": str(card)},
        ),
    )


def test_first_candidate_is_registered_with_lineage_artifacts_and_a_loadable_model(models, tmp_path):
    config = fast_config()
    run_id, _, register = _cycle(models, tmp_path, "a", "p1", config)
    # What fired the run, as its first step recorded it on the run (tests/pipelines/triggers/test_trigger_reason.py).
    reason = "drift in monthly_spend (psi 0.31 > 0.2)"
    mlflow.MlflowClient(local_tracking_uri(tmp_path)).set_tag(run_id, TRIGGER_REASON_TAG, reason)
    # Its time is benchmarks/pipeline.py's (the register step's split): a timed assertion fails under load.
    result = register()
    assert result.version == "1" and result.aliases == ["challenger", "champion"] and result.promoted
    assert result.servable and mv_servable(tmp_path, config) == "true"
    client = mlflow.MlflowClient(local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path))
    mv = client.get_model_version(config.registry.model_name, "1")
    assert mv.run_id == run_id
    # A person sees a dozen short tags; everything else is the run's lineage.json, checked against its digest.
    own = {k: v for k, v in mv.tags.items() if k != PROMOTION_TAG}  # a champion adds one record: who/when/why
    assert set(VERSION_TAGS) <= set(own) and len(own) <= MAX_TAGS and len(mv.tags) <= MAX_TAGS + 1, sorted(mv.tags)
    promotion = promotion_record(mv.tags)
    assert promotion["kind"] == "auto" and promotion["by"] and promotion["at"] and promotion["reason"]
    assert len(mv.tags[PROMOTION_TAG]) <= MAX_REASON_CHARS_IN_TAG + 400, mv.tags[PROMOTION_TAG]
    assert own["ctpipe.metric.accuracy"] and not any(k.startswith("ctpipe.metric.log_loss") for k in own)
    assert max(len(v) for v in own.values()) <= MAX_TAG_CHARS, own
    assert mv.tags["ctpipe.blessed"] == "true" and mv.tags["ctpipe.trigger"] == "new_data"
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    lineage = registry.lineage(mv)
    assert set(lineage) == set(LINEAGE_FIELDS) and lineage["compared_with"] == ""  # a first model
    assert all(lineage[f] not in (None, "") for f in LINEAGE_FIELDS if f != "compared_with"), lineage
    assert lineage["config"]["registry"]["model_name"] == config.registry.model_name
    # What `ctpipe models reproduce` checks: the export's platform facts and each data file the snapshot read.
    assert lineage["platform"]["torch"] == torch.__version__ and lineage["platform"]["device"] == "cpu"
    assert {f["path"] for f in lineage["data_files"]} == {f["path"] for f in json.loads((models["snap"] / "fingerprint.json").read_text())["files"]}
    assert set(lineage["metrics"]) >= {"accuracy", "log_loss"} and lineage["pipeline_run_id"] == "p1"
    assert lineage["trigger_reason"] == reason
    # Which task code made it: the built-in tabular task, ctpipe's version, a digest of the module's source.
    code = lineage["task_code"]
    assert code["entrypoint"] == "ctpipe.components.tasks.tabular:make_task" and code["distribution"] == "ctpipe"
    assert len(code["source_sha256"]) == 64
    # The record round-trips: written again, it is the same bytes, so the same digest the version holds.
    assert write_lineage(tmp_path / "again.json", lineage) == mv.tags["ctpipe.lineage_sha256"]
    # Whoever can write the artifact store cannot change it unnoticed: the registry holds its digest.
    write_lineage(tmp_path / "changed" / "lineage.json", {**lineage, "blessing_reasons": ["trust me"]})
    client.log_artifact(run_id, str(tmp_path / "changed" / "lineage.json"), "ctpipe")
    with pytest.raises(LineageError, match=r"version 1 of 'ctpipe-classifier'.*changed after registration"):
        show_version(registry, "1")
    files = {f.path for f in client.list_artifacts(run_id, "ctpipe")} | {
        f.path for f in client.list_artifacts(run_id, "reference")
    }
    assert {"ctpipe/model.pt", "reference/suite.json", "reference/reference_stats.json"} <= files
    use_tracking(local_tracking_uri(tmp_path))  # models:/ URIs resolve through the registry URI
    model = mlflow.pyfunc.load_model(f"models:/{config.registry.model_name}@champion")
    assert model.metadata.signature is not None
    from ctpipe.components.lib.data.snapshot import load_snapshot

    snap = load_snapshot(models["snap"])
    out = model.predict(snap.frame("test")[snap.schema.features].head(4))
    assert list(out.columns) == ["predicted_class", *snap.schema.classes]
    probabilities = out[snap.schema.classes].to_numpy()
    assert probabilities.sum(axis=1) == pytest.approx(1, abs=1e-5)
    assert list(out["predicted_class"]) == [snap.schema.classes[i] for i in probabilities.argmax(axis=1)]


def mv_servable(home, config) -> str:
    client = mlflow.MlflowClient(local_tracking_uri(home), registry_uri=local_tracking_uri(home))
    return client.get_model_version(config.registry.model_name, "1").tags["ctpipe.servable"]


def test_a_retried_register_returns_the_same_version(models, tmp_path):
    config = fast_config()
    _, _, register = _cycle(models, tmp_path, "a", "p1", config)
    first = register()
    again = register()
    assert (first.version, first.created) == ("1", True)
    assert (again.version, again.created) == ("1", False)
    assert len(Registry(local_tracking_uri(tmp_path), config.registry).versions()) == 1


def test_an_unblessed_candidate_is_only_challenger(models, tmp_path):
    config = fast_config()
    _cycle(models, tmp_path, "a", "p1", config)[2]()
    config.evaluate.thresholds["accuracy"].value = 0.999
    result = _cycle(models, tmp_path, "b", "p2", config)[2]()
    assert result.version == "2" and result.aliases == ["challenger"] and not result.promoted
    assert "not blessed" in result.promotion_reason
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    assert registry.alias_version("champion") == "1"
    assert registry.get_version("2").tags["ctpipe.blessed"] == "false"


def test_champion_moves_only_if_it_is_still_the_one_compared_against(models, tmp_path):
    config = fast_config()
    # Any candidate over the floor is blessed (model b is overfit: its log loss does not beat the prior's).
    config.evaluate.thresholds = {"accuracy": Threshold(value="baseline")}
    _cycle(models, tmp_path, "a", "p1", config)[2]()
    # Two runs evaluate against champion 1; the second finishes after the first promoted its model.
    _, _, register_b = _cycle(models, tmp_path, "b", "p2", config)
    _, blessing_c, register_c = _cycle(models, tmp_path, "c", "p3", config)
    assert json.loads(blessing_c.read_text())["champion_version"] == "1"
    assert json.loads(blessing_c.read_text())["champion_error"] is None  # its export matches ctpipe.model_sha256
    assert register_b().promoted
    late = register_c()
    assert not late.promoted and late.aliases == ["challenger"]
    assert "champion changed from version 1" in late.promotion_reason and "version 2" in late.promotion_reason
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    assert registry.alias_version("champion") == "2"
    assert registry.champion_stack() == ["1", "2"]
    # A short tag; the description's decision sentence says it whole.
    recorded = registry.get_version("3")
    decision = recorded.tags["ctpipe.promotion_decision"]
    assert len(decision) <= MAX_TAG_CHARS and late.promotion_reason.startswith(decision.removesuffix(CLIPPED))
    assert late.promotion_reason in recorded.description
    # Rollback returns to the previous champion and records why.
    outcome = registry.rollback(reason="bad canary", by="ops")
    assert (outcome.champion, outcome.previous) == ("1", "2")
    assert registry.alias_version("champion") == "1"
    assert promotion_record(registry.get_version("1").tags)["kind"] == "rollback"
    assert registry.champion_stack() == ["1"]


def test_a_lost_create_response_does_not_create_a_second_version(models, tmp_path, monkeypatch):
    config = fast_config(retries=3)
    _, _, register = _cycle(models, tmp_path, "a", "p1", config)
    real = mlflow.MlflowClient.create_model_version
    calls = []

    def create_then_drop_the_response(self, *args, **kwargs):
        calls.append(1)
        real(self, *args, **kwargs)
        if len(calls) == 1:
            raise ConnectionError("connection reset by peer after the server committed")
        raise AssertionError("a retry must find the version instead of creating another")

    monkeypatch.setattr(mlflow.MlflowClient, "create_model_version", create_then_drop_the_response)
    result = register()
    assert result.version == "1" and result.promoted and len(calls) == 1
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    assert [str(v.version) for v in registry.versions()] == ["1"]


def test_versions_not_registered_completely_are_never_promoted(models, tmp_path):
    from ctpipe.components.lib.errors import UserError

    config = fast_config()
    run_id, _, register = _cycle(models, tmp_path, "a", "p1", config)
    register()
    client = mlflow.MlflowClient(local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path))
    stray = client.create_model_version(config.registry.model_name, "file:///elsewhere", run_id=run_id)
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    with pytest.raises(UserError, match="not registered completely"):
        registry.promote_manual(str(stray.version), reason="try", by="me")
    assert registry.alias_version("champion") == "1"


def test_a_retry_after_a_promotion_cut_off_after_the_alias_moved_completes_its_record(models, tmp_path, monkeypatch):
    # The alias moved, then MLflow failed for good before the champion stack and history were written; the
    # step is run again. Before: the retry found "already the champion" and left the history at
    # version 1 (its audit saw the alias at 2, the history ending at 1) and the stack without version 2.
    from ctpipe.components.lib.registry.tags import STACK_TAG

    config = fast_config()
    config.evaluate.thresholds = {"accuracy": Threshold(value="baseline")}
    _cycle(models, tmp_path, "a", "p1", config)[2]()
    _, _, register_b = _cycle(models, tmp_path, "b", "p2", config)
    real = mlflow.MlflowClient.set_registered_model_tag

    def fail_on_the_stack(self, name, key, value):
        if key == STACK_TAG:
            raise ConnectionError("connection reset by peer")
        return real(self, name, key, value)

    monkeypatch.setattr(mlflow.MlflowClient, "set_registered_model_tag", fail_on_the_stack)
    # The alias move is the promotion's commit point: once it moved, the step says so (a failure reported
    # after it would be a "failed" promotion that moved production), and the record is completed later.
    first = register_b()
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    assert first.promoted and registry.alias_version("champion") == "2"
    assert [e["version"] for e in registry.champion_history()] == ["1"]
    monkeypatch.setattr(mlflow.MlflowClient, "set_registered_model_tag", real)
    registry.complete_champion_record()  # what `ctpipe gc` does each time the watcher's CronJob runs
    assert [e["version"] for e in registry.champion_history()] == ["1", "2"]
    again = register_b()
    assert again.version == "2" and again.promoted and not again.created
    assert registry.champion_stack() == ["1", "2"]
    assert [(e["version"], e["previous"]) for e in registry.champion_history()] == [("1", None), ("2", "1")]
    assert registry.rollback(reason="bad canary", by="ops").champion == "1"


def test_the_same_model_from_another_pipeline_run_is_not_registered_twice(models, tmp_path):
    """A cached rerun hands register the model KFP reused: it finds that model's version and says it created none."""
    config = fast_config()
    first = _cycle(models, tmp_path, "a", "p1", config)[2]()
    again = _cycle(models, tmp_path, "a", "p2", config)[2]()
    assert first.created and not again.created
    assert again.version == first.version == "1"
    assert "champion" in again.aliases
    client = mlflow.MlflowClient(local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path))
    assert len(client.search_model_versions(f"name='{config.registry.model_name}'")) == 1
    other = _cycle(models, tmp_path, "b", "p3", config)[2]()  # another file is a new version
    assert other.created and other.version == "2"


def test_a_cached_rerun_leaves_the_registered_versions_story_and_records_its_own_decision_on_its_run(models, tmp_path):
    """Issue 46: after an unchanged (cached) rerun, version 1's description read "Promoted v1: no worse than champion
    v1 (Δ +0.000)", compared with itself, and the first decision was gone from its page."""
    config = fast_config()
    first = _cycle(models, tmp_path, "a", "p1", config)[2]()
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    before = registry.get_version("1")
    aliases_before = registry.aliases()
    run_id, _, rerun = _cycle(models, tmp_path, "a", "p2", config)
    again = rerun()
    after = registry.get_version("1")
    assert after.description == before.description and after.description.startswith(first.decision)
    assert after.tags == before.tags and registry.aliases() == aliases_before
    assert registry.champion_history() == [{**registry.champion_history()[0]}] and len(registry.champion_history()) == 1
    assert (again.version, again.created, again.promoted) == ("1", False, False)
    assert again.decision.startswith("Registered nothing new: this model is already v1") and "nothing in the registry" \
        in again.decision
    assert again.data_fingerprint == before.tags["ctpipe.data_fingerprint"] and not again.description_error, again
    tags = mlflow.MlflowClient(local_tracking_uri(tmp_path)).get_run(run_id).data.tags
    assert tags["ctpipe.registered_version"] == "1" and tags["ctpipe.decision"].startswith("Registered nothing new")
    assert tags["ctpipe.registered_data_fingerprint"] == before.tags["ctpipe.data_fingerprint"]
    card = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="reports/model_card.md",
                                                    tracking_uri=local_tracking_uri(tmp_path)))
    assert f"**Decision:** {again.decision}" in card.read_text()


def test_each_version_is_described_by_its_decision_sentence_as_the_summary_and_the_card_have_it(models, tmp_path):
    """Before: an empty description, and the decision only in ~30 truncated tags. Now the version's description,
    the step's result (the run summary) and the model card logged on the run open with the same sentence."""
    config = fast_config()
    run_id, _, register = _cycle(models, tmp_path, "a", "p1", config)
    first = register()
    assert first.decision.startswith("Promoted v1: first model; beats") and not first.description_error
    config.evaluate.thresholds["accuracy"].value = 0.999
    second = _cycle(models, tmp_path, "b", "p2", config)[2]()
    assert second.decision.startswith("Kept v1: v2 was not blessed (")
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    for result in (first, second):
        description = registry.get_version(result.version).description
        assert description.startswith(result.decision), description
        assert "Test metrics: " in description and "reports/model_card.md" in description
        assert result.summary()["decision"] == result.decision
    card = Path(mlflow.artifacts.download_artifacts(run_id=run_id, artifact_path="reports/model_card.md",
                                                    tracking_uri=local_tracking_uri(tmp_path)))
    assert f"**Decision:** {first.decision}" in card.read_text()


def _as_older_layout(registry: Registry, number: str) -> None:
    """Make a version look as the older layout registered it: every lineage field its own tag, no artifact digest."""
    mv = registry.get_version(number)
    lineage = registry.lineage(mv)
    client, name = registry.client, registry.name
    client.delete_model_version_tag(name, number, LINEAGE_DIGEST_TAG)
    for field, value in lineage.items():
        if field == "metrics":
            for metric, figure in value.items():
                client.set_model_version_tag(name, number, f"ctpipe.metric.{metric}", f"{figure:.6g}")
        else:
            client.set_model_version_tag(name, number, f"ctpipe.{field}",
                                         value if isinstance(value, str) else json.dumps(value))


def test_a_champion_registered_with_every_field_as_a_tag_is_still_compared_shown_and_promoted(models, tmp_path):
    config = fast_config()
    config.evaluate.thresholds = {"accuracy": Threshold(value="baseline")}  # any candidate over the floor is blessed
    _cycle(models, tmp_path, "a", "p1", config)[2]()
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    _as_older_layout(registry, "1")
    assert LINEAGE_DIGEST_TAG not in registry.get_version("1").tags
    # ... and its promotion one tag per field, as it was recorded then.
    client, name = registry.client, registry.name
    for key, value in {PROMOTION_TAG: "auto", "ctpipe.promoted_at": "2026-01-01T00:00:00Z",
                       "ctpipe.promoted_by": "pipeline", "ctpipe.promotion_reason": "first model"}.items():
        client.set_model_version_tag(name, "1", key, value)
    assert promotion_record(registry.get_version("1").tags) == {
        "kind": "auto", "at": "2026-01-01T00:00:00Z", "by": "pipeline", "reason": "first model", "reason_uri": ""}
    # The next run is evaluated against the older champion and promoted over it.
    assert _cycle(models, tmp_path, "b", "p2", config)[2]().promoted
    assert registry.lineage(registry.get_version("2"))["compared_with"] == "1"
    shown = show_version(registry, "1")
    assert shown["config"]["registry"]["model_name"] == config.registry.model_name
    assert set(shown["metrics"]) >= {"accuracy", "log_loss"} and shown["blessing_reasons"]
    # Its recorded config (the champion alias a manual promotion checks) is read from its tags.
    assert registry.promote_manual("1", reason="back to the older one", by="ops").promoted
    assert registry.alias_version("champion") == "1"
    # Promoted again, it carries the one record: the older fields are gone, not left to contradict it.
    tags = registry.get_version("1").tags
    assert promotion_record(tags)["kind"] == "manual" and promotion_record(tags)["by"] == "ops"
    assert not {"ctpipe.promoted_at", "ctpipe.promoted_by", "ctpipe.promotion_reason"} & set(tags)
    assert shown["promotion"] == "auto" and shown["promoted_at"] == "2026-01-01T00:00:00Z"

