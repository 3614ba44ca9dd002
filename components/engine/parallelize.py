"""The one place that applies parallelism to a model: FSDP2 (``fully_shard`` on units that fit it, then the root) or DDP.

Models know nothing of ranks or devices (components/lib/models); this module wraps them after they are
built, following torchtitan's ``parallelize.py``: optional activation checkpointing and
``torch.compile`` per block first, then sharding. A block is its own FSDP unit only when it is large
(``train.fsdp_unit_min_params``); small blocks are grouped, or left to the root (``plan_fsdp_units``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch
from torch import nn


def has_bf16(device: torch.device) -> bool:
    """Whether the device does bf16 matmuls natively (CUDA with bf16, or a CPU with AVX512-BF16/AMX)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(setting: str, device: torch.device) -> torch.dtype:
    """The compute dtype for ``train.mixed_precision``.

    auto is bf16 on GPUs that have it and fp32 on CPU: even on a CPU with AVX512-BF16 the casts cost more
    than bf16 matmuls save for small models (0.85x for the default ~0.2M-parameter MLP, 1.5x for a 3M one,
    measured on the 2-core dev machine); ``bf16`` forces it.
    """
    if setting == "fp32":
        return torch.float32
    if setting == "bf16":
        return torch.bfloat16
    return torch.bfloat16 if device.type == "cuda" and has_bf16(device) else torch.float32


def planned_precision(config) -> torch.dtype:
    """The dtype the training ranks will compute in, known before they start (for the sanity gate, which
    runs in a CPU step before them): ``train.mixed_precision``, with ``auto`` resolved for the ranks'
    device as ``ctpipe.components.engine.device`` will choose it. Local ranks: this machine's GPU when it has
    one. Cluster ranks given GPUs: bf16 (the GPU is not visible from here; a GPU without bf16 makes the
    trainer fall back to fp32, so the gate then checks the stricter precision); given none: fp32."""
    from ctpipe.components.engine.device import gpus_per_rank

    setting = config.train.mixed_precision
    if setting != "auto":
        return resolve_precision(setting, torch.device("cpu"))
    gpus = gpus_per_rank(config)
    if gpus is None:
        local = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        return resolve_precision(setting, local)
    return torch.bfloat16 if gpus > 0 else torch.float32


def _checkpointed_forward(forward, *args, **kwargs):
    # Recompute the block in backward instead of keeping its activations (non-reentrant: works with FSDP2).
    return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)


def apply_activation_checkpointing(units: list[nn.Module]) -> None:
    """Recompute each unit's activations in backward; parameter names stay unchanged."""
    for block in units:
        block.forward = functools.partial(_checkpointed_forward, block.forward)


def apply_compile(units: list[nn.Module]) -> None:
    """Compile each unit in place (names unchanged), as torchtitan does before sharding."""
    for block in units:
        block.compile()


def plan_fsdp_units(block_params: list[int], min_unit_params: int) -> list[list[int]]:
    """Which blocks (by index) form each FSDP2 unit; blocks in no unit are sharded with the root.

    Every FSDP2 unit costs an all-gather in forward (and again in backward when it reshards) and a
    reduce-scatter in backward. For a small block each one is pure latency: the default ~0.2M-parameter
    MLP spent most of its step in a dozen collectives over two gloo ranks. So a block of at least
    ``min_unit_params`` parameters is its own unit (torchtitan's per-block sharding, which bounds memory
    for large models); runs of consecutive smaller blocks are grouped until a group reaches
    ``min_unit_params``; a group that stays below it joins the root. ``min_unit_params=0`` shards every block.
    """
    units: list[list[int]] = []
    group: list[int] = []
    group_params = 0
    for index, params in enumerate(block_params):
        if params >= min_unit_params:
            units.append([index])
            group, group_params = [], 0  # groups hold consecutive blocks only; a short one joins the root
            continue
        group.append(index)
        group_params += params
        if group_params >= min_unit_params:
            units.append(group)
            group, group_params = [], 0
    return units


def apply_fsdp(
    model: nn.Module, units: list[nn.Module], *, param_dtype: torch.dtype, min_unit_params: int = 0
) -> nn.Module:
    """Shard the task's ``shard_units`` as ``plan_fsdp_units`` groups them, then the root; bf16 parameters keep fp32 gradient reduction.

    A large block reshards after forward (its memory is what sharding saves); a group of small blocks
    keeps its parameters until backward (``reshard_after_forward=False``): it is at most about twice
    ``min_unit_params``, and that saves one all-gather per step.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    blocks = list(units)
    sizes = [sum(p.numel() for p in block.parameters()) for block in blocks]
    for unit in plan_fsdp_units(sizes, min_unit_params):
        if len(unit) == 1 and sizes[unit[0]] >= min_unit_params:
            fully_shard(blocks[unit[0]], mp_policy=policy)
        else:
            fully_shard([blocks[i] for i in unit], mp_policy=policy, reshard_after_forward=False)
    fully_shard(model, mp_policy=policy)
    return model


def apply_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """Replicate the model with DDP; mixed precision then comes from autocast in the worker."""
    from torch.nn.parallel import DistributedDataParallel

    if device.type == "cuda":
        return DistributedDataParallel(model, device_ids=[device.index])
    return DistributedDataParallel(model)


def parallelize(
    model: nn.Module,
    *,
    units: list[nn.Module],
    strategy: str,
    device: torch.device,
    compute_dtype: torch.dtype,
    activation_checkpointing: bool = False,
    compile: bool = False,
    fsdp_unit_min_params: int = 0,
) -> nn.Module:
    """Move the model to ``device`` and wrap it for data-parallel training across the process group.

    ``units`` are the submodules the task shards one by one (``Task.shard_units``); activation
    checkpointing and compilation apply per unit too."""
    model.to(device)
    if activation_checkpointing:
        apply_activation_checkpointing(units)
    if compile:
        apply_compile(units)
    if strategy == "fsdp":
        return apply_fsdp(model, units, param_dtype=compute_dtype, min_unit_params=fsdp_unit_min_params)
    if strategy == "ddp":
        return apply_ddp(model, device)
    raise ValueError(f"unknown strategy {strategy!r}")


@torch.no_grad()
def sync_buffers(model: nn.Module) -> None:
    """Rank 0's buffers on every rank, as DDP's ``broadcast_buffers`` does before each forward. FSDP2 shards
    parameters only: each rank's BatchNorm running statistics follow its own batches, so ranks would validate
    different models and a checkpoint would keep one rank's. Collective (every rank calls it)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    for buffer in model.buffers():
        dist.broadcast(buffer, src=0)


@torch.no_grad()
def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """Clip gradients by their global L2 norm and return the norm before clipping.

    FSDP2 gradients are shards (DTensors): the squared norms of the local shards are summed with ONE
    all-reduce of a scalar. torch.nn.utils.clip_grad_norm_ gets the same number through DTensor
    dispatch, which on this CPU cost more than the rest of a small model's step. Replicated (DDP)
    gradients are already global and are not reduced.
    """
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    sharded, replicated = [], []
    for p in parameters:
        if p.grad is not None:
            (sharded if isinstance(p.grad, DTensor) else replicated).append(p.grad)
    local = [g.to_local() for g in sharded]
    device = (local or replicated)[0].device
    squares = torch.zeros((), dtype=torch.float32, device=device)
    if local:
        squares += torch.stack(torch._foreach_norm(local, 2.0)).float().pow(2).sum()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(squares)
    if replicated:
        squares += torch.stack(torch._foreach_norm(replicated, 2.0)).float().pow(2).sum()
    total = squares.sqrt()
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    if local:
        torch._foreach_mul_(local, coef.to(local[0].dtype))
    if replicated:
        torch._foreach_mul_(replicated, coef.to(replicated[0].dtype))
    return total


def unwrap(model: nn.Module) -> nn.Module:
    """The model without a DDP wrapper (FSDP2 keeps the original module in place)."""
    return (
        model.module
        if hasattr(model, "module") and isinstance(model, nn.parallel.DistributedDataParallel)
        else model
    )


def uses_autocast(strategy: str, device: torch.device, compute_dtype: torch.dtype) -> bool:
    """Autocast where FSDP's parameter casting does not already give bf16 compute (DDP, and always on GPU)."""
    return compute_dtype != torch.float32 and (strategy == "ddp" or device.type == "cuda")
