"""The model zoo and the single-file export."""

import pandas as pd
import pytest
import torch

from ctpipe.components.lib.config import ModelConfig
from ctpipe.components.lib.data.encoding import Preprocessing
from ctpipe.components.lib.models.tabular import InputSpec, build_model, init_output_bias
from ctpipe.components.tasks.export import load_model_export, save_model_export

SPEC = InputSpec(n_numeric=3, cardinalities=[4, 3], n_classes=5)


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_models_map_features_to_logits_and_expose_blocks(kind):
    torch.manual_seed(0)
    model = build_model(ModelConfig(kind=kind, hidden=16, depth=2, heads=2), SPEC)
    logits = model(torch.randn(7, 3), torch.randint(0, 3, (7, 2)))
    assert logits.shape == (7, 5)
    assert len(model.blocks) == 2


@pytest.mark.parametrize("kind", ["mlp", "transformer"])
def test_same_seed_same_init(kind):
    cfg = ModelConfig(kind=kind, hidden=16, depth=2, heads=2)
    torch.manual_seed(3)
    a = build_model(cfg, SPEC).state_dict()
    torch.manual_seed(3)
    b = build_model(cfg, SPEC).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_output_bias_at_class_prior_gives_label_entropy_at_init():
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=16, depth=1, dropout=0.0), SPEC).eval()
    prior = torch.tensor([0.5, 0.2, 0.1, 0.1, 0.1])
    init_output_bias(model, prior)
    y = torch.multinomial(prior, 4000, replacement=True)
    loss = torch.nn.functional.cross_entropy(model(torch.randn(4000, 3), torch.randint(0, 3, (4000, 2))), y)
    entropy = float(-(prior * prior.log()).sum())
    assert loss.item() == pytest.approx(entropy, rel=0.05)


def test_export_round_trip_loads_with_weights_only(tmp_path):
    torch.manual_seed(0)
    cfg = ModelConfig(hidden=16, depth=1, dropout=0.0)
    spec = InputSpec(n_numeric=1, cardinalities=[3], n_classes=2)
    model = build_model(cfg, spec).eval()
    prep = Preprocessing(numeric={"x": {"mean": 1.0, "std": 2.0}}, categorical={"c": ["a", "b"]}, classes=["no", "yes"])
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    state = {**prep.to_dict(), "label": "y"}
    digest = save_model_export(tmp_path / "m.pt", model.state_dict(), cfg, task, state, {"step": 7})
    assert len(digest) == 64
    loaded = load_model_export(tmp_path / "m.pt")
    assert loaded.metadata == {"step": 7} and loaded.classes == ["no", "yes"]
    frame = pd.DataFrame({"x": [1.0, 3.0, None], "c": ["a", "zzz", "b"]})
    probs = loaded.predict_proba(frame)
    expected = torch.softmax(model(torch.tensor([[0.0], [1.0], [0.0]]), torch.tensor([[1], [0], [2]])), 1)
    assert torch.allclose(torch.from_numpy(probs), expected.detach(), atol=1e-6)
    # weights_only refuses arbitrary objects: the export must not contain any.
    torch.load(tmp_path / "m.pt", weights_only=True)


def test_export_rejects_foreign_files(tmp_path):
    torch.save({"format": "other"}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="not a ctpipe model export"):
        load_model_export(tmp_path / "x.pt")


def test_an_export_from_before_the_linear_path_loads_as_the_mlp_alone(tmp_path):
    """An export written before ``model.linear_path`` existed records no such key; its head reads the MLP alone, so it
    is rebuilt without the path (with the new default its weights would not fit: head.weight [2, 16] vs [2, 17])."""
    torch.manual_seed(0)
    old = ModelConfig(hidden=16, depth=1, dropout=0.0, linear_path=False)
    model = build_model(old, InputSpec(n_numeric=1, cardinalities=[3], n_classes=2)).eval()
    prep = Preprocessing(numeric={"x": {"mean": 1.0, "std": 2.0}}, categorical={"c": ["a", "b"]}, classes=["no", "yes"])
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    save_model_export(tmp_path / "m.pt", model.state_dict(), old, task, {**prep.to_dict(), "label": "y"}, {})
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    payload["model_config"].pop("linear_path")
    if "build_config" in payload:  # the whole config as JSON
        import json

        recorded = json.loads(payload["build_config"])
        recorded["model"].pop("linear_path")
        payload["build_config"] = json.dumps(recorded)
    torch.save(payload, tmp_path / "m.pt")
    loaded = load_model_export(tmp_path / "m.pt")
    assert loaded.predict_proba(pd.DataFrame({"x": [1.0], "c": ["a"]})).shape == (1, 2)
