"""The user's digits task (examples/digits) through ctpipe's steps: the sanity gate, validation and drift.

The task is imported as a user's module (its folder on sys.path), never from the ctpipe package.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from ctpipe.components.lib.errors import DataValidationError, SanityCheckError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.registry import _CACHE

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "digits"
TASK = ["data.key=id", "task.entrypoint=digits_task:make_task", "task.options.width=8"]
SMALL_SANITY = ["sanity.sample_rows=256", "sanity.overfit_steps=150", "sanity.short_train_steps=30",
                "train.batch_size=32", "train.lr=0.01"]


@pytest.fixture
def digits(tmp_path, monkeypatch):
    """The example's module importable, its partition writer, and a config naming the task."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import write_partitions

    yield write_partitions
    for name in ("digits_task", "write_partitions"):
        sys.modules.pop(name, None)
    _CACHE.clear()


def _snapshot(digits, tmp_path, overrides=()):
    from ctpipe.pipelines.local.train_alone import build_snapshot

    digits.write_partitions(tmp_path / "data", days=2, rows=700)
    config = load_config(None, [*TASK, *SMALL_SANITY, *overrides])
    build_snapshot(str(tmp_path / "data"), config, tmp_path / "snapshot")
    return config, str(tmp_path / "snapshot")


def _run_gate(config, snapshot, tmp_path, **kwargs):
    return run_sanity_checks(snapshot, config, report_path=str(tmp_path / "sanity.md"),
                             first_batch_path=str(tmp_path / "first_batch.json"), tracking_uri="", mlflow_run_id="",
                             summary_path=str(tmp_path / "sanity.json"), **kwargs)


def test_the_image_column_is_the_tasks_own_and_the_state_is_fitted_on_train(digits, tmp_path):
    _, snapshot = _snapshot(digits, tmp_path)
    schema = json.loads(Path(snapshot, "schema.json").read_text())
    assert schema["other"] == ["image"] and "image" not in schema["categorical"] + schema["numeric"]
    state = json.loads(Path(snapshot, "preprocessing.json").read_text())
    assert state["classes"] == [str(d) for d in range(10)] and 0 < state["images"]["image"]["mean"] < 1


def test_sanity_gate_runs_on_the_cnn_and_passes(digits, tmp_path):
    config, snapshot = _snapshot(digits, tmp_path)
    result = _run_gate(config, snapshot, tmp_path)
    assert result.passed
    checks = {c.name: c for c in result.checks}
    for name in ("init_loss_uniform", "init_loss_prior", "input_dependence", "gradients_flow", "batch_independence",
                 "batch_independence_train_mode", "overfit_one_batch", "loss_decreases", "beats_zero_input_baseline",
                 "first_batch_roundtrip", "task_outputs"):
        assert checks[name].passed, (name, checks[name].message)
    dump = json.loads((tmp_path / "first_batch.json").read_text())
    assert dump["image_inputs"][0]["shape"] == [32, 1, 8, 8] and len(dump["images"][0]["image"]) == 64


class MixesExamples(nn.Module):
    """A user's bug: normalises each image by the BATCH mean, so one image's prediction depends on the others."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.head = inner.head

    def forward(self, x_num, x_cat, image):
        return self.inner(x_num, x_cat, image - image.mean(dim=0, keepdim=True))


class IgnoresInput(nn.Module):
    """A user's bug: the forward pass never reads the image (returns learned constant logits)."""

    def __init__(self, n_classes: int) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.head = nn.Linear(4, n_classes)

    def forward(self, x_num, x_cat, image):
        return self.head(self.body(torch.ones(len(image), 4)))


def test_sanity_gate_stops_a_cnn_that_mixes_examples_across_the_batch(digits, tmp_path):
    config, snapshot = _snapshot(digits, tmp_path)
    from digits_task import DigitsCNN

    from ctpipe.task import Inputs

    inputs = Inputs(numeric=0, categorical=(), outputs=10, images=((1, 8, 8),))
    with pytest.raises(SanityCheckError) as caught:
        _run_gate(config, snapshot, tmp_path, model_factory=lambda: MixesExamples(DigitsCNN(inputs, 8, 2)))
    message = str(caught.value)
    assert message.startswith("sanity check 'batch_independence' failed") and "information flows between examples" in message


def test_sanity_gate_stops_a_model_that_ignores_its_input(digits, tmp_path):
    config, snapshot = _snapshot(digits, tmp_path)
    with pytest.raises(SanityCheckError) as caught:
        _run_gate(config, snapshot, tmp_path, model_factory=lambda: IgnoresInput(10))
    assert "input_dependence:" in str(caught.value) and "ignores the input" in str(caught.value)


def test_validation_runs_the_tasks_image_expectations_and_writes_its_drift_columns(digits, tmp_path):
    from ctpipe.components.steps.validate_data.validate import validate_data

    digits.write_partitions(tmp_path / "data", days=2, rows=700)
    config = load_config(None, TASK)
    kwargs = dict(config=config, snapshot_dir=str(tmp_path / "snap"), data_docs_path=str(tmp_path / "docs.html"),
                  report_path=str(tmp_path / "report.md"), tracking_uri="", mlflow_run_id="")
    validate_data(str(tmp_path / "data"), **kwargs)
    stats = json.loads((tmp_path / "snap" / "reference_stats.json").read_text())
    assert {"image__mean_intensity", "image__ink_fraction"} <= set(stats["numeric"])
    # With that suite as the reference, the image column is known: no "new column" anomaly next time.
    again = validate_data(str(tmp_path / "data"), **{
        **kwargs, "snapshot_dir": str(tmp_path / "snap1"),
        "config": load_config(None, [*TASK, f"validation.suite_path={tmp_path / 'snap' / 'suite.json'}"])})
    assert not [w for w in again.warnings if "image" in w], again.warnings

    # A new partition whose images are truncated (not 64 pixels) fails the task's GX expectations.
    broken = pd.read_parquet(tmp_path / "data" / "date=2026-01-02" / "part-0.parquet")
    broken["image"] = broken["image"].map(lambda b: b[:60])
    (tmp_path / "data" / "date=2026-01-03").mkdir()
    broken.to_parquet(tmp_path / "data" / "date=2026-01-03" / "part-0.parquet", index=False)
    with pytest.raises(DataValidationError) as caught:
        validate_data(str(tmp_path / "data"), **{**kwargs, "snapshot_dir": str(tmp_path / "snap2")})
    assert "image__decodable" in str(caught.value) or "image__pixels" in str(caught.value), str(caught.value)
    report = (tmp_path / "report.md").read_text()
    assert "image__decodable" in report and "image__pixels" in report


def test_the_watcher_judges_drift_of_the_images_through_the_tasks_statistics(digits, tmp_path):
    from ctpipe.components.lib.data.snapshot import Schema
    from ctpipe.components.lib.drift.feature_drift import compute_drift
    from ctpipe.components.steps.validate_data.task_reference import task_reference_stats
    from ctpipe.pipelines.triggers.window_drift import with_task_drift_columns

    config = load_config(None, TASK)
    task = load_task(config.task)
    schema = Schema(label="label", key="id", numeric=[], categorical=[], classes=[], other=["image"])
    reference = task_reference_stats(digits.digits_frame().head(900), schema, task)
    same = with_task_drift_columns(digits.digits_frame().tail(800), reference, config)
    inverted = with_task_drift_columns(digits.digits_frame(invert=True).tail(800), reference, config)
    assert not compute_drift(same, reference, config.watch).drifted
    drifted = compute_drift(inverted, reference, config.watch)
    assert "image__mean_intensity" in drifted.drifted_columns


def test_the_example_registers_under_its_own_model_name(digits):
    """Before: the README's digits command, run on the home of the README's first command, registered under
    the demo's 'ctpipe-classifier' and so was validated against the tabular champion's suite (nine 'column
    dropped' errors). The task brings its own registry.model_name, as causal_lm does; --set still wins."""
    from ctpipe.components.run_config import load_config

    assert load_config(None, TASK).registry.model_name == "ctpipe-digits"
    assert load_config(None, [*TASK, "registry.model_name=mine"]).registry.model_name == "mine"


def test_the_example_is_written_on_the_minimal_api_in_at_most_80_lines():
    """Before: 251 lines of the full task protocol (32 functions); the image column is now the public API's
    ``Image``, and the example holds the model alone."""
    lines = sum(len(p.read_text().splitlines()) for p in EXAMPLE.glob("*.py"))
    assert lines <= 80, lines
    assert "tabular_task(" in (EXAMPLE / "digits_task.py").read_text()
