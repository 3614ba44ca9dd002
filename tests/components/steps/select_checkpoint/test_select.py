"""Checkpoint selection: the best (not the last) checkpoint, exported safely and re-scored."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import ConfigError, TrainingError
from ctpipe.components.lib.models.tabular import InputSpec, build_model
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.select_checkpoint.select import select_and_export
from ctpipe.components.tasks.export import load_model_export
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fixtures.damage import a_model_shard, flip_bytes
from tests.fixtures.registry import tabular_arrays, tabular_preprocessing

CONFIG = ["data.key=customer_id", "model.hidden=16", "model.depth=1", "model.embedding_dim=4"]


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("select")
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=2)
    build_snapshot(str(root / "data"), load_config(None, CONFIG), root / "snapshot")
    return root / "snapshot"


def _val_metrics(model, snapshot) -> dict[str, float]:
    x_num, x_cat, y = (torch.tensor(a) for a in tabular_arrays(snapshot, "val"))
    with torch.no_grad():
        logits = model.eval()(x_num, x_cat)
    return {
        "val_accuracy": float((logits.argmax(1) == y).double().mean()),
        "val_loss": float(F.cross_entropy(logits, y)),
    }


def _fit(model, snapshot, steps: int) -> None:
    x_num, x_cat, y = (torch.tensor(a) for a in tabular_arrays(snapshot, "train"))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x_num, x_cat), y).backward()
        opt.step()


@pytest.fixture(scope="module")
def candidates(snapshot_dir):
    """Three models with increasingly good real val metrics: (worst, middle, best)."""
    config = load_config(None, CONFIG)
    snapshot = load_snapshot(snapshot_dir)
    prep = tabular_preprocessing(snapshot)
    spec = InputSpec(len(prep.numeric), prep.cardinalities, 4)
    candidates = []
    for steps in (0, 5, 60):
        torch.manual_seed(0)
        model = build_model(config.model, spec)
        _fit(model, snapshot, steps)
        candidates.append((_val_metrics(model, snapshot), model))
    candidates.sort(key=lambda c: c[0]["val_accuracy"])
    worst, middle, best = candidates
    assert best[0]["val_accuracy"] > middle[0]["val_accuracy"] > worst[0]["val_accuracy"]
    return candidates, spec


@pytest.fixture()
def checkpoints(candidates, tmp_path):
    """Real checkpoints (single-process DCP) at steps 10, 20, 30 with the best in the middle."""
    config = load_config(None, CONFIG)
    (worst, middle, best), spec = candidates
    entries = []
    for step, (metrics, model) in zip((10, 20, 30), (middle, best, worst), strict=True):
        opt = torch.optim.AdamW(model.parameters())
        ckpt.save_checkpoint(
            tmp_path, step, model=model, optimizer=opt, rank_state={}, meta={"step": step}, rank=0
        )
        entries.append(ckpt.IndexEntry(step, metrics))
    extra = {
        "model_config": vars(config.model),
        "input_spec": vars(spec),
        "dtype": "float32",
        "world_size": 1,
    }
    ckpt.write_index(tmp_path, entries, metric="val_accuracy", mode="max", extra=extra)
    return tmp_path, best


def test_selects_the_best_not_the_last_and_export_reproduces_it(checkpoints, snapshot_dir, tmp_path_factory):
    ckpt_dir, (best_metrics, best_model) = checkpoints
    out = tmp_path_factory.mktemp("export") / "model.pt"
    config = load_config(None, CONFIG)
    selected = select_and_export(str(ckpt_dir), str(snapshot_dir), config, str(out))
    assert selected.step == 20 and selected.metric_name == "val_accuracy"
    assert selected.metric_value == best_metrics["val_accuracy"]
    payload = torch.load(out, weights_only=True)  # no pickled code in the export
    assert payload["metadata"]["step"] == 20
    assert payload["metadata"]["data_fingerprint"] == load_snapshot(snapshot_dir).fingerprint
    # The network is rebuilt from the whole run config (with the indexed model section), not `model` alone.
    assert json.loads(payload["build_config"])["data"]["key"] == "customer_id"
    exported = load_model_export(out)
    for name, tensor in best_model.state_dict().items():
        assert torch.equal(exported.model.state_dict()[name], tensor)
    rescored = exported.metadata["export_val_metrics"]
    assert rescored["val_accuracy"] == pytest.approx(best_metrics["val_accuracy"], abs=1e-9)
    assert rescored["val_loss"] == pytest.approx(best_metrics["val_loss"], rel=1e-5)


def test_min_mode_and_other_metric(checkpoints, snapshot_dir, tmp_path):
    ckpt_dir, _ = checkpoints
    index = json.loads((ckpt_dir / "index.json").read_text())
    lowest = min(index["checkpoints"], key=lambda e: e["metrics"]["val_loss"])["step"]
    config = load_config(None, CONFIG + ["select.metric=val_loss", "select.mode=min"])
    assert select_and_export(str(ckpt_dir), str(snapshot_dir), config, str(tmp_path / "m.pt")).step == lowest


def test_unknown_metric_and_incomplete_checkpoints_are_refused(checkpoints, snapshot_dir, tmp_path):
    ckpt_dir, _ = checkpoints
    with pytest.raises(TrainingError, match="val_f1"):
        select_and_export(
            str(ckpt_dir),
            str(snapshot_dir),
            load_config(None, CONFIG + ["select.metric=val_f1"]),
            str(tmp_path / "m.pt"),
        )
    (ckpt.checkpoint_path(ckpt_dir, 20) / ckpt.COMPLETE_MARKER).unlink()  # as if its save had crashed
    selected = select_and_export(
        str(ckpt_dir), str(snapshot_dir), load_config(None, CONFIG), str(tmp_path / "m.pt")
    )
    assert selected.step != 20


def test_a_damaged_best_checkpoint_is_never_exported(checkpoints, snapshot_dir, tmp_path, capsys):
    """Before: 256 flipped bytes in a shard of the best checkpoint went unnoticed; selection exported it (or
    failed re-scoring it). Now its bytes are checked against the digests its index entry was committed with:
    it is skipped with a warning naming it, and the next best intact one is exported."""
    ckpt_dir, _ = checkpoints
    damaged = ckpt.checkpoint_path(ckpt_dir, 20)
    flip_bytes(a_model_shard(damaged))
    selected = select_and_export(str(ckpt_dir), str(snapshot_dir), load_config(None, CONFIG), str(tmp_path / "m.pt"))
    assert selected.step == 10  # the second best
    assert len(selected.warnings) == 1 and str(damaged) in selected.warnings[0]
    assert str(damaged) in capsys.readouterr().out
    assert load_model_export(tmp_path / "m.pt").metadata["step"] == 10

    # The checkpoint's own record re-written to match the damage: the index entry still disagrees, still skipped.
    ckpt.write_digests(damaged)
    selected = select_and_export(str(ckpt_dir), str(snapshot_dir), load_config(None, CONFIG), str(tmp_path / "m.pt"))
    assert selected.step == 10


def test_when_every_checkpoint_is_damaged_none_is_exported(checkpoints, snapshot_dir, tmp_path):
    ckpt_dir, _ = checkpoints
    for step in (10, 20, 30):
        flip_bytes(a_model_shard(ckpt.checkpoint_path(ckpt_dir, step)))
    with pytest.raises(TrainingError, match="damaged") as err:
        select_and_export(str(ckpt_dir), str(snapshot_dir), load_config(None, CONFIG), str(tmp_path / "m.pt"))
    assert all(str(ckpt.checkpoint_path(ckpt_dir, s)) in str(err.value) for s in (10, 20, 30))
    assert not (tmp_path / "m.pt").exists()


# --- the metric's direction ---------------------------------------------------------------------


def test_a_loss_metric_selects_the_lowest_loss_without_a_mode(checkpoints, snapshot_dir, tmp_path):
    ckpt_dir, _ = checkpoints
    index = json.loads((ckpt_dir / "index.json").read_text())
    lowest = min(index["checkpoints"], key=lambda e: e["metrics"]["val_loss"])["step"]
    highest = max(index["checkpoints"], key=lambda e: e["metrics"]["val_loss"])["step"]
    assert lowest != highest
    config = load_config(None, CONFIG + ["select.metric=val_loss"])
    assert config.select.direction == "min"
    assert select_and_export(str(ckpt_dir), str(snapshot_dir), config, str(tmp_path / "m.pt")).step == lowest


@pytest.mark.parametrize(
    "sets",
    [
        ["select.metric=val_loss", "select.mode=max"],
        ["select.metric=val_accuracy", "select.mode=min"],
        ["select.metric=val_macro_f1", "select.mode=min"],
    ],
)
def test_a_mode_contradicting_the_metric_is_a_config_error(sets):
    with pytest.raises(ConfigError, match=r"select\.mode") as err:
        load_config(None, sets)
    assert "auto" in str(err.value)


def test_an_unknown_metric_needs_an_explicit_mode():
    with pytest.raises(ConfigError, match=r"select\.mode"):
        load_config(None, ["select.metric=val_custom_score"])
    assert load_config(None, ["select.metric=val_custom_score", "select.mode=min"]).select.direction == "min"
    assert load_config(None, []).select.direction == "max"
    assert load_config(None, ["select.metric=val_roc_auc"]).select.direction == "max"


def test_ties_on_the_metric_go_to_the_lower_validation_loss():
    entries = [
        ckpt.IndexEntry(10, {"val_accuracy": 0.9, "val_loss": 0.40}),
        ckpt.IndexEntry(20, {"val_accuracy": 0.9, "val_loss": 0.30}),
        ckpt.IndexEntry(30, {"val_accuracy": 0.8, "val_loss": 0.20}),
    ]
    assert [e.step for e in ckpt.rank_entries(entries, "val_accuracy", "max")] == [20, 10, 30]
    # Equal on both: the earlier step.
    entries[0].metrics["val_loss"] = 0.30
    assert ckpt.rank_entries(entries, "val_accuracy", "max")[0].step == 10
    with pytest.raises(ValueError, match="max or min"):
        ckpt.rank_entries(entries, "val_accuracy", "auto")


# --- the training split recorded with the export ------------------------------------------------


def test_the_export_records_the_split_settings_and_a_digest_of_the_training_keys(checkpoints, snapshot_dir, tmp_path):
    from ctpipe.components.lib.data.splits import CANONICAL_FORM, keys_digest

    ckpt_dir, _ = checkpoints
    select_and_export(str(ckpt_dir), str(snapshot_dir), load_config(None, CONFIG), str(tmp_path / "m.pt"))
    split = load_model_export(tmp_path / "m.pt").metadata["split"]
    config = load_config(None, CONFIG)
    assert {k: split[k] for k in ("key", "salt", "val_fraction", "test_fraction", "canonical_form")} == {
        "key": "customer_id", "salt": config.data.split_salt, "val_fraction": config.data.val_fraction,
        "test_fraction": config.data.test_fraction, "canonical_form": CANONICAL_FORM,
    }
    train = load_snapshot(snapshot_dir).frame("train")
    assert split["train_rows"] == len(train)
    assert split["train_keys_sha256"] == keys_digest(train["customer_id"].astype(str))
    assert split["partitions"] == ["date=2026-01-01", "date=2026-01-02"]


def test_an_export_with_a_config_that_did_not_make_the_snapshot_is_refused(checkpoints, snapshot_dir, tmp_path):
    from ctpipe.components.lib.errors import DataValidationError

    ckpt_dir, _ = checkpoints
    other = load_config(None, CONFIG + ["data.split_salt=another"])
    with pytest.raises(DataValidationError, match="split_salt"):
        select_and_export(str(ckpt_dir), str(snapshot_dir), other, str(tmp_path / "m.pt"))


def test_checkpoints_of_another_snapshot_are_refused_naming_both_fingerprints(checkpoints, snapshot_dir, tmp_path):
    """Before: the export took the split record and fingerprint of whatever snapshot it was given, so a model
    trained on one snapshot was exported with another's lineage, silently. Now the index's fingerprint must
    match; an index without one (older runs) is exported as before."""
    from ctpipe.components.lib.errors import DataValidationError

    ckpt_dir, _ = checkpoints
    index_path = ckpt_dir / "index.json"
    index = json.loads(index_path.read_text())
    config, out = load_config(None, CONFIG), tmp_path / "m.pt"
    fingerprint = load_snapshot(snapshot_dir).fingerprint
    index_path.write_text(json.dumps(index | {"data_fingerprint": "f" * 64}))
    with pytest.raises(DataValidationError) as err:
        select_and_export(str(ckpt_dir), str(snapshot_dir), config, str(out))
    assert "f" * 64 in str(err.value) and fingerprint in str(err.value)
    assert not out.exists()

    index_path.write_text(json.dumps(index | {"data_fingerprint": fingerprint}))
    assert select_and_export(str(ckpt_dir), str(snapshot_dir), config, str(out)).step == 20
