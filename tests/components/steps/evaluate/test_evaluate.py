"""evaluate_candidate against MLflow on SQLite: first model, champion comparison, own preprocessing."""

from __future__ import annotations

import json
from dataclasses import replace

import mlflow
import numpy as np
import pytest

from ctpipe.components.lib.data.encoding import encode_labels
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.metrics import compute_metrics
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.components.tasks.export import load_model_export
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot, tabular_preprocessing


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    snap = make_snapshot(root)
    return {
        "root": root,
        "snap": snap,
        "good": make_model(snap, root / "good.pt", steps=80, seed=0),
        "bad": make_model(snap, root / "bad.pt", steps=0, seed=1),
    }


def _evaluate(world, tmp_path, model, config, run_id):
    uri = local_tracking_uri(tmp_path)
    return evaluate_candidate(
        str(model),
        str(world["snap"]),
        config,
        tracking_uri=uri,
        mlflow_run_id=run_id,
        blessing_path=str(tmp_path / "blessing.json"),
        card_path=str(tmp_path / "card.md"),
    )


def _register(world, tmp_path, model, config, run_id, pipeline_run_id):
    return register_candidate(
        str(model),
        str(world["snap"]),
        str(tmp_path / "blessing.json"),
        config,
        tracking_uri=local_tracking_uri(tmp_path),
        mlflow_run_id=run_id,
        pipeline_run_id=pipeline_run_id,
        trigger="manual",
        reports={"model_card": str(tmp_path / "card.md")},
    )


def test_first_model_is_blessed_on_value_alone_and_writes_blessing_card_and_run_metrics(world, tmp_path):
    config = fast_config()
    run_id = make_run(local_tracking_uri(tmp_path), config)
    result = _evaluate(world, tmp_path, world["good"], config, run_id)
    assert result.blessed and result.champion_version is None and result.champion_metrics is None
    assert any("first model" in r for r in result.reasons)
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    assert blessing["blessed"] is True and blessing["champion_version"] is None
    assert set(blessing["candidate_metrics"]) == {"accuracy", "macro_f1", "log_loss"}
    assert np.array(result.confusion_matrix).sum() == result.test_rows
    card = (tmp_path / "card.md").read_text()
    for heading in (
        "## Blessing and its reasons",
        "## Metrics on the test split",
        "## Slices",
        "## Data",
        "## Lineage",
    ):
        assert heading in card
    run = mlflow.MlflowClient(
        local_tracking_uri(tmp_path), registry_uri=local_tracking_uri(tmp_path)
    ).get_run(run_id)
    assert run.data.metrics["test_accuracy"] == pytest.approx(result.candidate_metrics["accuracy"])
    assert run.data.tags["ctpipe.blessed"] == "true"


def test_no_thresholds_blesses_nothing(world, tmp_path):
    config = fast_config()
    config.evaluate.thresholds = {}
    run_id = make_run(local_tracking_uri(tmp_path), config)
    result = _evaluate(world, tmp_path, world["good"], config, run_id)
    assert not result.blessed
    assert "no blessing thresholds are configured" in result.reasons[0]


def test_change_only_rules_do_not_bless_a_first_model(world, tmp_path):
    from ctpipe.components.lib.config import Threshold

    config = fast_config()
    config.evaluate.thresholds = {"accuracy": Threshold(change_abs=-0.02)}
    run_id = make_run(local_tracking_uri(tmp_path), config)
    result = _evaluate(world, tmp_path, world["good"], config, run_id)
    assert not result.blessed and "no configured rule applies" in result.reasons[0]


def test_value_floor_fails_an_untrained_first_model(world, tmp_path):
    config = fast_config()
    run_id = make_run(local_tracking_uri(tmp_path), config)
    result = _evaluate(world, tmp_path, world["bad"], config, run_id)
    assert not result.blessed
    assert any("fails value threshold" in r for r in result.reasons)


def test_champion_is_scored_on_the_same_split_with_its_own_preprocessing(world, tmp_path):
    config = fast_config()
    config.evaluate.beat_linear = False  # an 80-step champion, worse than logistic regression: not what is tested here
    uri = local_tracking_uri(tmp_path)
    snap = load_snapshot(world["snap"])
    # The champion was trained on different statistics: shifted means and a reordered vocabulary.
    prep = tabular_preprocessing(snap)
    shifted = replace(
        prep,
        numeric={c: {"mean": s["mean"] + s["std"], "std": s["std"] * 2} for c, s in prep.numeric.items()},
        categorical={c: list(reversed(v)) for c, v in prep.categorical.items()},
    )
    champion_file = make_model(
        world["snap"], tmp_path / "champion.pt", steps=80, seed=3, prep_override=shifted
    )
    run1 = make_run(uri, config, "p1")
    assert _evaluate(world, tmp_path, champion_file, config, run1).blessed
    assert _register(world, tmp_path, champion_file, config, run1, "p1").aliases == ["challenger", "champion"]

    run2 = make_run(uri, config, "p2")
    result = _evaluate(world, tmp_path, world["bad"], config, run2)
    assert result.champion_version == "1"
    frame = snap.frame("test")
    y = encode_labels(frame, snap.schema.label, prep.classes)
    champion = load_model_export(champion_file)
    own = compute_metrics(y, champion.predict_proba(frame).astype(np.float64))
    assert result.champion_metrics == pytest.approx(own)
    # Scoring the champion's weights with the candidate's statistics would give other numbers.
    champion.state = {**champion.state, **prep.to_dict()}
    wrong = compute_metrics(y, champion.predict_proba(frame).astype(np.float64))
    assert wrong["log_loss"] != pytest.approx(own["log_loss"])
    # The untrained candidate regresses beyond the allowed change: not blessed, naming the champion numbers.
    assert not result.blessed
    assert any("vs champion" in r and "allowed change" in r for r in result.reasons)
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    assert blessing["champion_version"] == "1"
    assert blessing["differences"]["accuracy"]["high"] < 0
    # Drift of the predictions: the champion's own test predictions, kept beside its reference statistics on
    # registration, against the untrained candidate's (the prior's class on every row) on the new test split.
    kept = mlflow.MlflowClient(uri).download_artifacts(run1, "reference/predictions.json", str(tmp_path / "kept"))
    expected = blessing_of_champion_counts(load_model_export(champion_file), frame, prep.classes)
    assert json.loads(open(kept).read())["counts"] == expected
    drift = blessing["prediction_drift"]
    assert drift["comparable"] and drift["statistic"] == "cramers_v" and drift["drifted"], drift
    assert "## Drift of the predictions" in (tmp_path / "card.md").read_text()
    assert mlflow.MlflowClient(uri).get_run(run2).data.metrics["prediction_drift_cramers_v"] == drift["value"]


def blessing_of_champion_counts(champion, frame, classes) -> dict[str, int]:
    """What the champion predicted on its test split, as class counts."""
    predicted = champion.predict_proba(frame).argmax(axis=1)
    return {name: int((predicted == i).sum()) for i, name in enumerate(classes)}


def test_a_champion_that_cannot_be_scored_blocks_the_blessing_and_says_why(world, tmp_path):
    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    stray_run = make_run(uri, config, "outside")
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    client.create_registered_model(config.registry.model_name)
    client.create_model_version(config.registry.model_name, "file:///elsewhere", run_id=stray_run)
    client.set_registered_model_alias(config.registry.model_name, "champion", "1")
    result = _evaluate(world, tmp_path, world["good"], config, make_run(uri, config, "p2"))
    assert not result.blessed and result.champion_version == "1" and result.champion_metrics is None
    assert (
        "champion version 1 has no 'ctpipe/model.pt'" in result.reasons[0]
        and "ctpipe models promote" in result.reasons[0]
    )


@pytest.mark.parametrize("content", ["empty", "garbage", "not_an_export"])
def test_a_champion_whose_export_cannot_be_read_blocks_the_blessing_and_says_why(world, tmp_path, content):
    import torch

    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    stray_run = make_run(uri, config, "outside")
    broken = tmp_path / "art" / "model.pt"
    broken.parent.mkdir()
    if content == "empty":
        broken.write_bytes(b"")
    elif content == "garbage":
        broken.write_bytes(np.random.default_rng(0).bytes(1000))
    else:
        torch.save([1, 2, 3], broken)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    client.log_artifact(stray_run, str(broken), "ctpipe")
    client.create_registered_model(config.registry.model_name)
    client.create_model_version(config.registry.model_name, "file:///elsewhere", run_id=stray_run)
    client.set_registered_model_alias(config.registry.model_name, "champion", "1")
    result = _evaluate(world, tmp_path, world["good"], config, make_run(uri, config, "p2"))
    assert not result.blessed and result.champion_version == "1" and result.champion_metrics is None
    assert "champion version 1 cannot be loaded" in result.reasons[0] and "model.pt" in result.reasons[0]
    assert "ctpipe models promote" in result.reasons[0]


def test_a_champion_download_that_fails_for_a_moment_is_retried_not_called_a_champion_without_a_model(
    world, tmp_path, monkeypatch
):
    # Before: every download error (MLflow unreachable included) read as "not logged", so a moment's outage
    # made "champion version 1 has no 'ctpipe/model.pt'": not compared, and the card advised promoting by hand.
    from mlflow.exceptions import MlflowException

    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    run1 = make_run(uri, config, "p1")
    _evaluate(world, tmp_path, world["good"], config, run1)
    assert _register(world, tmp_path, world["good"], config, run1, "p1").aliases == ["challenger", "champion"]
    real, calls = mlflow.artifacts.download_artifacts, []

    def unreachable_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise MlflowException("API request to http://mlflow/api/2.0/mlflow/runs/get failed with exception "
                                  "HTTPConnectionPool: Max retries exceeded (connection refused)")
        return real(*args, **kwargs)

    monkeypatch.setattr(mlflow.artifacts, "download_artifacts", unreachable_once)
    result = _evaluate(world, tmp_path, world["good"], config, make_run(uri, config, "p2"))
    # The model file: one failed try and its retry; then the champion's kept test predictions, once.
    assert len(calls) == 3 and result.champion_version == "1" and result.champion_metrics is not None
    assert not any("has no 'ctpipe/model.pt'" in r for r in result.reasons)


def _rare_positive_snapshot(root):
    """A snapshot of 90/10 data (a label the features barely predict), split as the pipeline splits."""
    import pandas as pd

    from ctpipe.components.lib.data.splits import SplitSettings
    from ctpipe.pipelines.local.train_alone import build_snapshot
    from tests.fixtures.registry import split_config

    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame(
        {"id": np.arange(n), "x": rng.normal(size=n), "c": rng.choice(["a", "b"], n),
         "label": np.where(rng.random(n) < 0.1, "yes", "no")}
    )
    (root / "data" / "date=2026-01-01").mkdir(parents=True)
    frame.to_parquet(root / "data" / "date=2026-01-01" / "part-0.parquet", index=False)
    split = SplitSettings(key="id", salt="t", val_fraction=0.1, test_fraction=0.3)
    build_snapshot(str(root / "data"), split_config(split), root / "snapshot")
    return root / "snapshot"


def test_a_constant_prior_predictor_is_not_blessed_as_a_first_model(tmp_path):
    import torch

    from ctpipe.components.lib.models.tabular import InputSpec, build_model
    from ctpipe.components.tasks.export import save_model_export
    from tests.fixtures.registry import TINY_MODEL

    snap_dir = _rare_positive_snapshot(tmp_path)
    snap = load_snapshot(snap_dir)
    prep = tabular_preprocessing(snap)
    spec = InputSpec(len(prep.numeric), prep.cardinalities, len(prep.classes))
    model = build_model(TINY_MODEL, spec)
    train_y = encode_labels(snap.frame("train"), snap.schema.label, prep.classes)
    prior = np.bincount(train_y, minlength=len(prep.classes)) / len(train_y)
    with torch.no_grad():  # what a model that learnt only the class prior is: a constant output
        model.head.weight.zero_()
        model.head.bias.copy_(torch.log(torch.tensor(prior, dtype=torch.float32)))
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    state = {**prep.to_dict(), "label": snap.schema.label}
    save_model_export(tmp_path / "prior.pt", model.state_dict(), TINY_MODEL, task, state, {"step": 0})
    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    result = evaluate_candidate(
        str(tmp_path / "prior.pt"), str(snap_dir), config, tracking_uri=uri, mlflow_run_id=make_run(uri, config),
        blessing_path=str(tmp_path / "blessing.json"), card_path=str(tmp_path / "card.md"),
    )
    assert result.candidate_metrics["accuracy"] > 0.85 and result.candidate_metrics["roc_auc"] == pytest.approx(0.5)
    assert not result.blessed
    assert any("fails value threshold 'baseline'" in r and "prior predictor" in r for r in result.reasons)
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    assert blessing["baseline_metrics"]["accuracy"] == pytest.approx(result.candidate_metrics["accuracy"])
    assert "fails value threshold 'baseline'" in (tmp_path / "card.md").read_text()


def test_a_champion_trained_on_rows_of_this_test_split_is_not_compared(world, tmp_path):
    from ctpipe.components.lib.data.splits import SplitSettings
    from tests.fixtures.registry import SNAPSHOT_SPLIT

    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    # The champion came from the same data split with another salt: many of today's test rows were its training rows.
    other = SplitSettings(key="customer_id", salt="another salt", val_fraction=0.1, test_fraction=0.3)
    other_snap = make_snapshot(world["root"], split=other, name="snapshot-other-salt")
    champion_file = make_model(other_snap, tmp_path / "champion.pt", steps=80, seed=3, split=other)
    run1 = make_run(uri, config, "p1")
    assert _evaluate(world, tmp_path, champion_file, config, run1).blessed
    assert _register(world, tmp_path, champion_file, config, run1, "p1").aliases == ["challenger", "champion"]

    run2 = make_run(uri, config, "p2")
    result = _evaluate(world, tmp_path, world["good"], config, run2)
    assert not result.blessed and result.champion_metrics is not None
    test_rows = len(load_snapshot(world["snap"]).frame("test"))
    blessing = json.loads((tmp_path / "blessing.json").read_text())
    check = blessing["champion_split_check"]
    # About 70% of the test rows are train rows under the other salt (its train fraction is 0.6).
    assert check["ok"] is False and 0.5 * test_rows < check["overlap_rows"] < 0.75 * test_rows
    assert "champion version 1 is not compared" in result.reasons[0] and "training rows" in result.reasons[0]
    assert "were its training rows" in (tmp_path / "card.md").read_text()

    # The same candidate against a champion with the same split settings is compared as usual.
    assert SNAPSHOT_SPLIT.salt != other.salt
    same = make_model(world["snap"], tmp_path / "same.pt", steps=80, seed=4)
    run3 = make_run(uri, config, "p3")
    _evaluate(world, tmp_path, same, config, run3)
    client = mlflow.MlflowClient(uri, registry_uri=uri)
    version = _register(world, tmp_path, same, config, run3, "p3").version
    client.set_registered_model_alias(config.registry.model_name, "champion", version)
    _evaluate(world, tmp_path, world["good"], config, make_run(uri, config, "p4"))
    check = json.loads((tmp_path / "blessing.json").read_text())["champion_split_check"]
    assert check["ok"] is True and check["overlap_rows"] == 0


def test_a_champion_without_a_split_record_is_not_compared(world, tmp_path):
    import torch

    config = fast_config()
    uri = local_tracking_uri(tmp_path)
    legacy = tmp_path / "legacy.pt"
    payload = torch.load(world["good"], weights_only=True)
    del payload["metadata"]["split"]  # as exported before models recorded their split
    torch.save(payload, legacy)
    run1 = make_run(uri, config, "p1")
    _evaluate(world, tmp_path, legacy, config, run1)
    _register(world, tmp_path, legacy, config, run1, "p1")
    result = _evaluate(world, tmp_path, world["good"], config, make_run(uri, config, "p2"))
    assert not result.blessed and "records no training split" in result.reasons[0]


def test_a_champion_that_fails_to_load_with_any_error_blocks_the_blessing_and_says_why(world, tmp_path, monkeypatch):
    """Rebuilding an old champion with today's task code can fail in ways no list of exception types foresees
    (an AttributeError in the model builder on an old state). Before, only DataValidationError/ValueError/
    KeyError/TypeError/RuntimeError were reported; anything else crashed the evaluate step of every run with
    that champion."""
    import ctpipe.components.lib.tracking as tracking
    from ctpipe.components.lib.tracking.store import VersionFiles
    from ctpipe.components.steps.evaluate import evaluate as evaluate_module

    export = tmp_path / "champion-model.pt"
    export.write_bytes(b"stand-in: load_model_export is replaced below")
    monkeypatch.setattr(tracking, "fetch_champion_files",
                        lambda uri, registry, paths, dst: VersionFiles("4", {p: str(export) for p in paths}))

    def old_state_meets_new_code(path):
        raise AttributeError("'dict' object has no attribute 'numeric'")

    monkeypatch.setattr(evaluate_module, "load_model_export", old_state_meets_new_code)
    score, model = evaluate_module.load_champion("sqlite:///unused.db", fast_config())
    assert model is None and score.version == "4"
    assert score.error == ("champion version 4 cannot be loaded from its 'ctpipe/model.pt': "
                           "AttributeError: 'dict' object has no attribute 'numeric'")
