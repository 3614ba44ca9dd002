"""The register step of a run with trigger ``reproduce`` (``ctpipe models reproduce VERSION --host``): it compares
the rebuilt model with the version it rebuilds and records the result there; it never creates a version, moves an
alias or rewrites a description, whatever the comparison says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctpipe.components.lib.registry.catalog import show_version
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import REPRODUCTION_TAG
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.components.steps.register.reproduction import NothingToReproduce
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("reproduce")
    snap = make_snapshot(root)
    return {"snap": snap, "a": make_model(snap, root / "a.pt", steps=40, seed=0),
            "b": make_model(snap, root / "b.pt", steps=60, seed=1)}


def _register(models, home, name, run, config, trigger):
    """Evaluate and register candidate ``name`` as pipeline run ``run`` with ``trigger``."""
    uri = local_tracking_uri(home)
    run_id = make_run(uri, config, run)
    blessing, card = home / f"{run}-blessing.json", home / f"{run}-card.md"
    evaluate_candidate(str(models[name]), str(models["snap"]), config, tracking_uri=uri, mlflow_run_id=run_id,
                       blessing_path=str(blessing), card_path=str(card))
    return register_candidate(str(models[name]), str(models["snap"]), str(blessing), config, tracking_uri=uri,
                              mlflow_run_id=run_id, pipeline_run_id=run, trigger=trigger,
                              reports={"model_card": str(card)}), run_id


@pytest.fixture(scope="module")
def home(models, tmp_path_factory):
    """Version 1 registered by a manual run (candidate "a"); the tests leave it registered as it was."""
    home = tmp_path_factory.mktemp("home")
    first, _ = _register(models, home, "a", "p1", fast_config(), "manual")
    assert first.version == "1" and first.created
    return home


def _card(registry, tmp_path) -> str:
    """Version 1's model card as logged on its run."""
    import mlflow.artifacts

    return Path(mlflow.artifacts.download_artifacts(run_id=registry.get_version("1").run_id,
                                                    artifact_path="reports/model_card.md", dst_path=str(tmp_path),
                                                    tracking_uri=registry.uri)).read_text()


def _state(registry):
    """Everything a reproduction run must leave as it was: versions, aliases, descriptions, tags but its own."""
    return [(str(v.version), v.description, {k: t for k, t in (v.tags or {}).items() if k != REPRODUCTION_TAG})
            for v in registry.versions()], registry.aliases()


def test_a_reproduction_run_registers_nothing_and_records_its_result_on_the_version(models, home, tmp_path):
    config = fast_config()
    registry = Registry(local_tracking_uri(home), config.registry)
    before = _state(registry)

    same, run_id = _register(models, home, "a", "p2", config, "reproduce")
    assert (same.version, same.created, same.promoted) == ("1", False, False)
    assert "Reproduced v1 bit for bit" in same.decision and "registered nothing" in same.decision
    assert _state(registry) == before
    recorded = json.loads(registry.get_version("1").tags[REPRODUCTION_TAG])
    assert recorded["result"] == "identical" and recorded["max_param_diff"] == 0.0
    shown = show_version(registry, "1")["reproduction"]
    assert shown["result"] == "identical" and shown["at"]
    assert registry.client.get_run(run_id).data.tags["ctpipe.reproduced_version"] == "1"
    card = _card(registry, tmp_path / "c1")
    assert card.count("## Reproduction") == 1 and "bit-identical" in card and f"pipeline run {run_id}" in card
    assert card.index("## Serving check") < card.index("## Reproduction")  # the card as registered, then this

    # Other weights (a rebuild that came out different): a mismatch, recorded; still nothing registered or moved.
    other, _ = _register(models, home, "b", "p3", config, "reproduce")
    assert other.version == "1" and not other.created and "NOT identical" in other.decision
    assert _state(registry) == before
    recorded = json.loads(registry.get_version("1").tags[REPRODUCTION_TAG])
    assert recorded["result"] == "mismatch" and recorded["max_param_diff"] > 0
    card = _card(registry, tmp_path / "c2")  # the latest result only, in place of the earlier one
    assert card.count("## Reproduction") == 1 and "NOT identical" in card and "bit-identical" not in card


def test_a_reproduction_run_no_version_records_is_refused_and_registers_nothing(models, home):
    config = fast_config()
    registry = Registry(local_tracking_uri(home), config.registry)
    before = _state(registry)
    config.train.max_steps += 1  # a config no version was trained with
    with pytest.raises(NothingToReproduce, match="no version of 'ctpipe-classifier' was trained on data") as err:
        _register(models, home, "b", "p4", config, "reproduce")
    assert "nothing was registered" in str(err.value)
    assert _state(registry) == before
