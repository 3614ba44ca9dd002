"""FSDP2 units sized to the model: per-block sharding for large blocks, grouped or root-only for small ones."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from ctpipe.components.engine.parallelize import apply_fsdp, plan_fsdp_units
from ctpipe.components.lib.config import ModelConfig
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.models.tabular import InputSpec, build_model
from ctpipe.components.run_config import load_config

SPEC = InputSpec(n_numeric=6, cardinalities=[5, 7], n_classes=3)


@pytest.fixture
def one_rank_group(tmp_path):
    """A real gloo process group of one rank in this process, destroyed afterwards."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _unit_of(module: torch.nn.Module):
    """The FSDP2 state a module belongs to as a unit of its own or a group, None when the root holds it."""
    return module._get_fsdp_state() if isinstance(module, FSDPModule) else None


def test_small_blocks_are_left_to_the_root():
    assert plan_fsdp_units([66_000] * 3, 1_000_000) == []


def test_large_blocks_are_each_their_own_unit():
    assert plan_fsdp_units([4_000_000] * 3, 1_000_000) == [[0], [1], [2]]


def test_small_blocks_are_grouped_until_a_group_reaches_the_threshold():
    assert plan_fsdp_units([400] * 7, 1_000) == [[0, 1, 2], [3, 4, 5]]  # block 6 joins the root


def test_groups_hold_consecutive_blocks_only():
    assert plan_fsdp_units([600, 5_000, 600, 600], 1_000) == [[1], [2, 3]]


def test_zero_threshold_shards_every_block():
    assert plan_fsdp_units([1, 2, 3], 0) == [[0], [1], [2]]


def test_default_model_is_sharded_at_the_root_only(one_rank_group):
    config = load_config(None, [])
    torch.manual_seed(0)
    model = build_model(config.model, SPEC)
    assert all(sum(p.numel() for p in b.parameters()) < config.train.fsdp_unit_min_params for b in model.blocks)
    apply_fsdp(model, list(model.blocks), param_dtype=torch.float32, min_unit_params=config.train.fsdp_unit_min_params)
    assert isinstance(model, FSDPModule)
    assert [_unit_of(b) for b in model.blocks] == [None] * len(model.blocks)
    model(torch.randn(4, 6), torch.zeros(4, 2, dtype=torch.long)).sum().backward()


def test_a_model_with_large_blocks_keeps_per_block_sharding(one_rank_group):
    config = load_config(None, ["model.hidden=1024"])  # ~4.2M parameters per block
    torch.manual_seed(0)
    model = build_model(config.model, SPEC)
    apply_fsdp(model, list(model.blocks), param_dtype=torch.float32, min_unit_params=config.train.fsdp_unit_min_params)
    units = [_unit_of(b) for b in model.blocks]
    assert all(u is not None for u in units)
    assert len({id(u) for u in units}) == len(units)  # one unit per block
    assert model._get_fsdp_state() not in units


def test_small_blocks_over_a_low_threshold_share_one_unit(one_rank_group):
    torch.manual_seed(0)
    model = build_model(ModelConfig(hidden=32, depth=4), SPEC)  # 4,256 parameters per block
    apply_fsdp(model, list(model.blocks), param_dtype=torch.float32, min_unit_params=8_000)
    units = [_unit_of(b) for b in model.blocks]
    assert units[0] is units[1] and units[2] is units[3] and units[0] is not units[2]
    model(torch.randn(4, 6), torch.zeros(4, 2, dtype=torch.long)).sum().backward()


def test_negative_threshold_names_the_field():
    with pytest.raises(ConfigError, match=r"train\.fsdp_unit_min_params.*must be in \[0, "):
        load_config(None, ["train.fsdp_unit_min_params=-1"])
