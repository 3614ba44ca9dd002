"""The export rebuilds the network from the whole config its task's build_model was given, not `model` alone."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch

from ctpipe.components.lib.config import Config, ModelConfig
from ctpipe.components.lib.data.encoding import Preprocessing
from ctpipe.components.run_config import load_config
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.export import load_model_export, save_model_export
from ctpipe.components.tasks.registry import _CACHE

# A user's task whose network width is a task option, read in build_model from the config it is given.
WIDE_TASK = textwrap.dedent('''
    from dataclasses import replace

    from ctpipe.components.lib.models.tabular import build_model
    from ctpipe.components.tasks.tabular import TabularClassification


    class WideTabular(TabularClassification):
        name = "wide_tabular"

        def build_model(self, config, state):
            model = replace(config.model, hidden=int(config.task.options.get("hidden", 16)))
            return build_model(model, self.input_spec(state))


    def make_task(**options):
        return WideTabular()
''')
PREP = Preprocessing(numeric={"x": {"mean": 1.0, "std": 2.0}}, categorical={"c": ["a", "b"]}, classes=["no", "yes"])
FRAME = pd.DataFrame({"x": [1.0, 3.0, None], "c": ["a", "zzz", "b"]})


@pytest.fixture
def wide_task(tmp_path, monkeypatch):
    (tmp_path / "wide_task.py").write_text(WIDE_TASK)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("wide_task", None)
    _CACHE.clear()


def test_a_task_reading_its_options_in_build_model_gets_the_trained_network_back(wide_task, tmp_path):
    config = load_config(None, ["task.entrypoint=wide_task:make_task", "task.options.hidden=24",
                                "model.depth=1", "model.dropout=0.0"])
    task = load_task(config.task)
    state = {**PREP.to_dict(), "label": "y"}
    torch.manual_seed(0)
    model = task.model.build(config, state).eval()
    record = {"name": config.task.name, "entrypoint": config.task.entrypoint, "options": dict(config.task.options)}
    save_model_export(tmp_path / "m.pt", model.state_dict(), config.model, record, state, {}, config)
    loaded = load_model_export(tmp_path / "m.pt")  # with model.hidden alone (16) the shapes would not match
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[name], tensor)
    assert np.allclose(loaded.predict_proba(FRAME), task.serving.serve(model, FRAME, state).to_numpy())


def test_an_export_written_before_the_config_was_recorded_loads_as_before(tmp_path):
    from ctpipe.components.lib.models.tabular import InputSpec, build_model

    cfg = ModelConfig(hidden=16, depth=1, dropout=0.0)
    model = build_model(cfg, InputSpec(n_numeric=1, cardinalities=[3], n_classes=2)).eval()
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    save_model_export(tmp_path / "m.pt", model.state_dict(), cfg, task, {**PREP.to_dict(), "label": "y"}, {})
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    assert Config.from_json(payload["build_config"]).model == cfg
    del payload["build_config"]  # as exported before
    torch.save(payload, tmp_path / "old.pt")
    old = load_model_export(tmp_path / "old.pt")
    assert old.model_config == cfg and old.predict_proba(FRAME).shape == (3, 2)


def test_the_config_must_be_the_one_of_the_exported_model(tmp_path):
    with pytest.raises(ValueError, match="build_config.model"):
        save_model_export(tmp_path / "m.pt", {}, ModelConfig(hidden=8), {"name": "tabular_classification"}, {}, {},
                          Config(model=ModelConfig(hidden=16)))


def test_a_recorded_config_this_ctpipe_cannot_read_is_named_with_the_file(tmp_path):
    import json

    from ctpipe.components.lib.models.tabular import InputSpec, build_model

    cfg = ModelConfig(hidden=16, depth=1, dropout=0.0)
    model = build_model(cfg, InputSpec(n_numeric=1, cardinalities=[3], n_classes=2))
    task = {"name": "tabular_classification", "entrypoint": None, "options": {}}
    save_model_export(tmp_path / "m.pt", model.state_dict(), cfg, task, {**PREP.to_dict(), "label": "y"}, {})
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    recorded = json.loads(payload["build_config"])
    recorded["data"]["a_key_of_another_version"] = 1
    payload["build_config"] = json.dumps(recorded)
    torch.save(payload, tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"other.pt'.*config its network was built from.*a_key_of_another_version"):
        load_model_export(tmp_path / "other.pt")
