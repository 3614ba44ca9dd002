"""The minimal task API (components/tasks/public.py): a model factory makes a complete task of its family;
a loss and extra metrics only where the family's do not fit; the regression example trains on diabetes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import infer_schema
from ctpipe.components.tasks import complete_task
from ctpipe.components.tasks.public import Inputs, TaskMetric, tabular_task

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "regression"


def rows(n: int = 200) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    x = rng.normal(size=n)
    return pd.DataFrame({"x": x, "kind": rng.choice(["a", "b", "c"], n), "y": 3.0 * x + rng.normal(0, 0.1, n),
                         "label": np.where(x > 0, "up", "down")})


class Linear(nn.Module):
    def __init__(self, inputs: Inputs) -> None:
        super().__init__()
        self.embeddings = nn.ModuleList(nn.Embedding(n, 2) for n in inputs.categorical)
        self.head = nn.Linear(inputs.numeric + 2 * len(inputs.categorical), inputs.outputs)

    def forward(self, x_num, x_cat):
        return self.head(torch.cat([x_num] + [e(x_cat[:, i]) for i, e in enumerate(self.embeddings)], dim=1))


def fitted(task, label: str):
    data = rows().drop(columns=[c for c in ("y", "label") if c != label])
    schema = infer_schema(data, label=label, key=None, features=[], categorical=[], label_kind=task.codec.label_kind)
    return data, task.codec.fit(data, schema)


@pytest.mark.parametrize(("family", "label", "outputs"), [("classification", "label", 2), ("regression", "y", 1)])
def test_a_model_factory_makes_a_complete_task_of_its_family(family, label, outputs):
    task = complete_task(tabular_task("mine", family=family, model=Linear), "test")
    data, state = fitted(task, label)
    model = task.model.build(Config(), state)
    assert model.head.out_features == outputs and model.head.in_features == 1 + 2
    assert task.name == "mine" and "registry.model_name=ctpipe-mine" in task.defaults
    assert task.model.shard_units(model) == []  # no blocks: the root is the one FSDP unit
    described = task.describe_model(Config(), state)
    assert described["kind"] == "Linear" and described["parameters"] == sum(p.numel() for p in model.parameters())


def test_a_loss_and_extra_metrics_where_the_family_does_not_fit():
    def absolute(outputs, targets):
        return (outputs.reshape(-1) - targets).abs()

    def within_one(targets, predictions):
        return float((np.abs(targets - predictions) < 1.0).mean())

    task = complete_task(tabular_task("mine", family="regression", model=Linear, loss=absolute,
                                      metrics={"within_one": TaskMetric(within_one, higher_is_better=True)}), "test")
    assert [m.name for m in task.scoring.metrics] == ["rmse", "mae", "r2", "within_one"]
    outputs, targets = torch.tensor([[1.0], [-2.0]]), torch.tensor([0.0, 0.0])
    assert task.objective.row_losses(outputs, targets).tolist() == [1.0, 2.0] and float(task.objective.loss(outputs, targets)) == 1.5
    [init] = task.checks.init_losses(targets, {"classes": []}, 0.1)
    assert init.expected == 0.0  # |0 - 0|: the user's loss of a zero output
    y, p = np.array([0.0, 1.0, 2.0]), np.array([0.5, 1.0, 5.0])
    assert task.scoring.compute_metrics(y, p)["within_one"] == pytest.approx(2 / 3)
    draws = task.scoring.bootstrap(y, {"m": p}, samples=20, seed=0)
    assert set(draws["m"]) == {"rmse", "mae", "r2", "within_one"} and len(draws["m"]["within_one"]) == 20
    with pytest.raises(ValueError, match="metric\\(s\\) rmse are the family's own"):
        tabular_task("mine", family="regression", model=Linear, metrics={"rmse": TaskMetric(within_one, False)})
    with pytest.raises(ValueError, match="family must be one of classification, regression"):
        tabular_task("mine", family="ranking", model=Linear)


def test_the_regression_example_learns_the_diabetes_score_better_than_the_mean(monkeypatch):
    from sklearn.datasets import load_diabetes

    monkeypatch.syspath_prepend(str(EXAMPLE))
    from ctpipe.components.tasks import load_task

    task = load_task({"name": "tabular_regression", "entrypoint": "diabetes_task:make_task", "options": {"width": 16}})
    assert task.name == "diabetes"
    # Huber: quadratic within delta, linear beyond it (MSE would give 12.5 for an error of 5).
    assert task.objective.row_losses(torch.tensor([[5.0]]), torch.tensor([0.0])).tolist() != [12.5]
    data = load_diabetes(as_frame=True).frame
    train, test = data.iloc[:350], data.iloc[350:]
    schema = infer_schema(train, label="target", key=None, features=[], categorical=[], label_kind=task.codec.label_kind)
    state = task.codec.fit(train, schema)
    torch.manual_seed(0)
    model = task.model.build(Config(), state)
    batch = task.codec.encode(train, state)
    task.model.init(model, state, batch.targets)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    for _ in range(300):
        optimiser.zero_grad()
        task.objective.loss(model(*batch.inputs), batch.targets).backward()
        optimiser.step()
    y = task.codec.targets(test, state)
    found = task.scoring.compute_metrics(y, task.scoring.predict(model, test, state, state))
    assert found["rmse"] < task.scoring.compute_metrics(y, task.scoring.baseline(y, state))["rmse"] and found["r2"] > 0.3


class WithImage(nn.Module):
    """x_num and a 2x3 two-channel image, read together."""

    def __init__(self, inputs: Inputs) -> None:
        super().__init__()
        channels, height, width = inputs.images[0]
        self.head = nn.Linear(inputs.numeric + channels * height * width, inputs.outputs)

    def forward(self, x_num, x_cat, image):
        return self.head(torch.cat([x_num, image.flatten(1)], dim=1))


@pytest.mark.parametrize(("family", "label"), [("classification", "label"), ("regression", "y")])
def test_an_image_column_reaches_the_model_standardised_and_is_checked_drift_watched_and_dumped(family, label):
    """Before: an image column needed the full protocol (the digits example's 251 lines)."""
    from ctpipe.components.tasks.public import Image

    data = rows(120).drop(columns=["kind", "y" if label == "label" else "label"])
    rng = np.random.default_rng(1)
    pixels = rng.integers(0, 256, (len(data), 12), dtype=np.uint8)
    data["photo"] = [p.tobytes() for p in pixels]
    task = complete_task(tabular_task("photos", family=family, model=WithImage,
                                      images=[Image("photo", (2, 2, 3))]), "test")
    schema = infer_schema(data, label=label, key=None, features=[], categorical=[], label_kind=task.codec.label_kind)
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    assert schema.other == ["photo"] and schema.numeric == ["x"]
    state = task.codec.fit(data, schema)
    assert state["images"]["photo"]["mean"] == pytest.approx((pixels / 255).mean(), rel=1e-5)
    batch = task.codec.encode(data, state)
    x_num, x_cat, image = batch.inputs
    assert image.shape == (120, 2, 2, 3) and image.dtype == torch.float32
    assert abs(float(image.mean())) < 1e-4 and float(image.std()) == pytest.approx(1.0, rel=1e-3)
    model = task.model.build(Config(), state)
    assert model.head.in_features == 1 + 12
    assert len(task.scoring.predict(model, data, state, state)) == len(data)
    dump = task.checks.describe_batch(batch.select(torch.arange(4)), data.head(4), state, schema)
    assert dump["images"][0]["photo"] == pytest.approx(pixels[0].tolist(), abs=1e-2)
    assert task.checks.batch_mismatches(dump, data.head(4), schema) == []
    shifted = data.head(4).assign(photo=[(p // 2).tobytes() for p in pixels[:4]])
    assert any("photo" in m for m in task.checks.batch_mismatches(dump, shifted, schema))
    # Validation's derived columns and expectations; the watcher's drift statistics.
    broken = data.head(3).assign(photo=[b"\x00" * 11, pixels[1].tobytes(), None])
    checked = task.profile.check_columns(broken, schema)
    assert checked["photo__decodable"].tolist() == [False, True, False]
    assert checked["photo__pixels"].tolist() == [11, 12, -1]
    assert {e["kwargs"]["column"] for e in task.profile.expectations(schema)} == {"photo__decodable", "photo__pixels"}
    drift = task.profile.drift_columns(data, schema)
    assert drift["photo__mean_intensity"].to_numpy() == pytest.approx(pixels.mean(axis=1) / 255)


def test_an_image_of_a_wrong_shape_is_refused_when_the_task_is_made():
    from ctpipe.components.tasks.public import Image

    with pytest.raises(ValueError, match=r"Image 'photo': shape must be \(height, width\) or \(channels, height, width\)"):
        Image("photo", (64,))
