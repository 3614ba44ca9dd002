"""The run's config: the compiled config with the run's overrides (the KFP UI's config_overrides)."""

from __future__ import annotations

import pytest

from components.config import load_config
from components.errors import ConfigError
from components.run_setup.prepare import resolve_config


def test_run_overrides_apply_on_top_of_the_compiled_config():
    compiled = load_config(None, ["train.backend=pytorchjob", "train.max_steps=50"]).to_json()
    config = resolve_config(compiled, "train.max_steps=70; train.lr=0.01")
    assert (config.train.max_steps, config.train.lr, config.train.backend) == (70, 0.01, "pytorchjob")


def test_a_cluster_pipeline_refuses_a_run_override_to_the_local_backend():
    compiled = load_config(None, ["train.backend=pytorchjob"]).to_json()
    with pytest.raises(ConfigError, match=r"train\.backend=local.*compiled for a cluster.*pytorchjob"):
        resolve_config(compiled, "train.backend=local")


def test_a_local_pipeline_keeps_its_local_backend():
    compiled = load_config(None, []).to_json()
    assert resolve_config(compiled, "train.max_steps=500").train.backend == "local"
