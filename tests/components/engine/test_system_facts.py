"""The run's params name the model its task builds (``Task.describe_model``), not only the config's model section."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ctpipe.components.engine.trainer import Trainer
from ctpipe.components.run_config import load_config
from ctpipe.components.tasks import load_task


def facts(settings: list[str], state: dict) -> dict:
    cfg = load_config(None, settings)
    # system_facts reads only these of a built Trainer (which needs a process group and a snapshot).
    trainer = SimpleNamespace(cfg=cfg, task=load_task(cfg.task), state=state, n_params=10, global_batch=8,
                              dtype=torch.float32, d=SimpleNamespace(world_size=1, device=torch.device("cpu")))
    return Trainer.system_facts(trainer)


def test_a_language_models_params_name_its_decoder():
    from ctpipe.components.tasks.causal_lm import CausalLM

    logged = facts(["task.name=causal_lm"], {"model": CausalLM().model_config.to_dict()})
    assert logged["system.model.d_model"] == "64" and logged["system.model.seq_len"] == "64"
    assert "system.model.hidden" not in logged


def test_the_tabular_params_name_the_model_section():
    logged = facts(["model.hidden=32"], {})
    assert logged["system.model.kind"] == "mlp" and logged["system.model.hidden"] == "32"
