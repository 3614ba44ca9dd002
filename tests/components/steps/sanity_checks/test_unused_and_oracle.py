"""Issue 48's sanity blind spots: a model that reads a sliver of its input (``unused_inputs``) and a predict without
the inverse of the target's encoding (``oracle_roundtrip``), each stopped before training with its cause named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo_regression import LABEL, write_regression_demo
from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.sanity_checks.oracle_roundtrip import check_oracle_roundtrip
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.registry import _CACHE
from ctpipe.pipelines.local.train_alone import build_snapshot

SMALL = ["sanity.sample_rows=256", "sanity.overfit_steps=150", "sanity.short_train_steps=30", "train.batch_size=32"]


@pytest.fixture(autouse=True)
def _fresh_tasks():
    yield
    _CACHE.clear()


def _gate(config: Config, snapshot: str, out, **kwargs):
    return run_sanity_checks(snapshot, config, report_path=str(out / "sanity.md"),
                             first_batch_path=str(out / "first_batch.json"), tracking_uri="", mlflow_run_id="",
                             **kwargs)


def _digits_snapshot(tmp_path, settings: list[str]) -> tuple[Config, str]:
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.reshape(-1, 64).astype(np.uint8)[:600]
    frame = pd.DataFrame({"id": np.arange(600), "image": [p.tobytes() for p in pixels], "label": digits.target[:600]})
    (tmp_path / "digits" / "date=2026-01-01").mkdir(parents=True)
    frame.to_parquet(tmp_path / "digits" / "date=2026-01-01" / "part-0.parquet", index=False)
    config = load_config(None, ["data.key=id", *settings, *SMALL, "train.lr=0.01"])
    build_snapshot(str(tmp_path / "digits"), config, tmp_path / "snapshot")
    return config, str(tmp_path / "snapshot")


def test_a_model_that_reads_a_sliver_of_its_image_is_stopped_naming_the_unread_pixels(tmp_path):
    config, snapshot = _digits_snapshot(tmp_path, ["task.entrypoint=ctpipe.testing.task_bugs:digit_images",
                                                   "task.options.sliver=true"])
    with pytest.raises(SanityCheckError) as err:
        _gate(config, snapshot, tmp_path / "sliver")
    message = str(err.value)
    assert "'unused_inputs'" in message and "the model never reads 56 of its 64 input units" in message, message
    assert "image 'image': 56 of 64 pixel blocks (88%)" in message and "the model reads a sliver of its input" in message


def test_the_same_network_over_the_whole_image_reads_every_pixel(tmp_path):
    config, snapshot = _digits_snapshot(tmp_path, ["task.entrypoint=ctpipe.testing.task_bugs:digit_images"])
    result = _gate(config, snapshot, tmp_path / "healthy")
    (unused,) = [c for c in result.checks if c.name == "unused_inputs"]
    assert unused.passed and "all 64 input units (image 'image') reach the output" in unused.message


class DropsAColumn(nn.Module):
    """The built-in MLP fed its numeric columns with the last one zeroed (an off-by-one slice)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.head = inner, inner.head

    def forward(self, x_num, x_cat):
        return self.inner(torch.cat([x_num[:, :-1], torch.zeros_like(x_num[:, -1:])], dim=1), x_cat)


class DropsACategory(DropsAColumn):
    def forward(self, x_num, x_cat):
        return self.inner(x_num, torch.cat([x_cat[:, :-1], torch.zeros_like(x_cat[:, -1:])], dim=1))


@pytest.mark.parametrize(("bug", "named"), [(DropsAColumn, "numeric column: 1 of 5 columns (20%): 'satisfaction'"),
                                            (DropsACategory, "categorical column: 1 of 3 columns (33%): 'plan'")])
def test_one_unread_tabular_column_is_named(tmp_path, bug, named):
    from ctpipe.components.lib.data.demo import write_demo_data

    write_demo_data(tmp_path / "demo", days=2, rows_per_day=500)
    config = load_config(None, ["data.key=customer_id", *SMALL])
    build_snapshot(str(tmp_path / "demo"), config, tmp_path / "snapshot")
    task = load_task(config.task)
    from ctpipe.components.lib.data.snapshot import load_snapshot

    state = load_snapshot(tmp_path / "snapshot").state
    with pytest.raises(SanityCheckError) as err:
        _gate(config, str(tmp_path / "snapshot"), tmp_path / "out",
              model_factory=lambda: bug(task.model.build(config, state)))
    assert named in str(err.value), str(err.value)


@pytest.fixture(scope="module")
def spend(tmp_path_factory):
    root = tmp_path_factory.mktemp("spend")
    write_regression_demo(root / "data", days=2, rows_per_day=500)
    return root


@pytest.mark.parametrize(("factory", "named"), [
    ("regression_without_inverse", "predict returns the model's outputs in the encoded (training) units, not the "
                                   "label's: a missing inverse transform"),
    ("regression_with_wrong_inverse", "predict maps the encoded targets to other values: a wrong inverse transform"),
])
def test_a_predict_without_the_inverse_of_the_target_encoding_is_stopped_before_training(spend, tmp_path, factory,
                                                                                         named):
    config = load_config(None, [f"task.entrypoint=ctpipe.testing.task_bugs:{factory}", "data.key=customer_id",
                                f"data.label={LABEL}", *SMALL])
    build_snapshot(str(spend / "data"), config, tmp_path / "snapshot")
    with pytest.raises(SanityCheckError) as err:
        _gate(config, str(tmp_path / "snapshot"), tmp_path / "out")
    message = str(err.value)
    assert "'oracle_roundtrip'" in message and named in message, message
    assert "does not get its target back from predict (codec.targets)" in message


def test_the_built_in_regression_gets_its_targets_back(spend, tmp_path):
    from ctpipe.components.lib.data.snapshot import load_snapshot

    config = load_config(None, ["task.name=tabular_regression", "data.key=customer_id", f"data.label={LABEL}"])
    snap = build_snapshot(str(spend / "data"), config, tmp_path / "snapshot")
    task = load_task(config.task)
    state = load_snapshot(snap.root).state
    rows = next(load_snapshot(snap.root).batches("train")).iloc[:32]
    torch.manual_seed(0)
    result = check_oracle_roundtrip(task, task.model.build(config, state), rows, state)
    assert result.passed and "predict returns each of 32 first-batch rows' target" in result.message


def test_predict_that_encodes_rows_otherwise_than_encode_is_named(spend, tmp_path):
    from dataclasses import replace

    from ctpipe.components.lib.data.snapshot import load_snapshot

    config = load_config(None, ["task.name=tabular_regression", "data.key=customer_id", f"data.label={LABEL}"])
    snap = build_snapshot(str(spend / "data"), config, tmp_path / "snapshot")
    task = load_task(config.task)
    state = load_snapshot(snap.root).state
    rows = next(load_snapshot(snap.root).batches("train")).iloc[:16]
    shifted = {**state, "numeric": {k: {**v, "mean": v["mean"] + 1.0} for k, v in state["numeric"].items()}}

    def predict(model, frame, state_, reference):  # serving standardises with other statistics than training
        return task.scoring.predict(model, frame, shifted, reference)

    broken = replace(task, scoring=replace(task.scoring, predict=predict))
    result = check_oracle_roundtrip(broken, task.model.build(config, state), rows, state)
    assert not result.passed and "predict fed the model inputs that codec.encode does not make for these rows " \
                                 "(16 of 16 rows)" in result.message


def test_the_built_in_regression_passes_the_gate_with_its_label_decoded_in_the_first_batch(spend, tmp_path):
    # Before: the tabular first-batch dump read the standardised label as a class index (IndexError).
    import json

    config = load_config(None, ["task.name=tabular_regression", "data.key=customer_id", f"data.label={LABEL}", *SMALL])
    build_snapshot(str(spend / "data"), config, tmp_path / "snapshot")
    result = _gate(config, str(tmp_path / "snapshot"), tmp_path / "out")
    assert result.passed and {c.name for c in result.checks} >= {"oracle_roundtrip", "unused_inputs"}
    first = json.loads((tmp_path / "out" / "first_batch.json").read_text())["rows"][0]["label"]
    assert first["column"] == LABEL and isinstance(first["decoded"], float)
