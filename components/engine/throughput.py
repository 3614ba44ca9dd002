"""Model FLOPs and the device's peak matmul rate, for model FLOPs utilisation (MFU).

MFU = achieved model FLOP/s per device / peak matmul FLOP/s of the same device and dtype. FLOPs per
sample are counted once (forward + backward) on the unsharded model; the CPU peak is measured at start-up with the worker's own threads, the GPU peak taken from the datasheet.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

# Dense (no sparsity) datasheet peaks, FLOP/s, for the GPUs we expect to run on.
GPU_PEAK_FLOPS = {
    ("H100", torch.bfloat16): 989e12,
    ("H100", torch.float32): 67e12,
    ("H200", torch.bfloat16): 989e12,
    ("H200", torch.float32): 67e12,
    ("A100", torch.bfloat16): 312e12,
    ("A100", torch.float32): 19.5e12,
}


def flops_per_sample(model: nn.Module, example: tuple[torch.Tensor, ...]) -> float:
    """Training (forward + backward = 3x forward) matmul FLOPs per sample, from one probing forward.

    Counted with forward hooks on ``nn.Linear`` and ``nn.MultiheadAttention`` (projections plus the two
    attention matmuls), and a torch-function mode for ``scaled_dot_product_attention`` called directly
    (a decoder's attention is invisible to module hooks), rather than torch's FlopCounterMode, whose
    import of torch._dynamo adds ~5 s to every worker's start-up. Attention counts its full score
    matrix even when causal (the PaLM convention, as ``flops_per_token`` of the language-model task);
    embedding lookups, norms and activations are not matmuls and not counted, as is usual for MFU.
    """
    total = [0.0]
    inside_multihead = [0]

    def linear_hook(module: nn.Linear, inputs, output) -> None:
        rows = inputs[0].numel() // module.in_features
        total[0] += 2.0 * rows * module.in_features * module.out_features

    def attention_hook(module: nn.MultiheadAttention, inputs, output) -> None:
        inside_multihead[0] -= 1
        query = inputs[0]
        batch, tokens, width = query.shape if module.batch_first else query.transpose(0, 1).shape
        projections = 2.0 * batch * tokens * width * (3 * width + width)  # q, k, v in; out
        attention = 2.0 * 2.0 * batch * tokens * tokens * width  # scores and weighted values
        total[0] += projections + attention

    def entering_multihead(module, inputs) -> None:
        inside_multihead[0] += 1

    def sdpa_flops(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> None:
        if not inside_multihead[0]:
            # (..., L, E) x (..., S, E) scores, then (..., L, S) x (..., S, Ev) weighted values
            leading = query.numel() // (query.shape[-2] * query.shape[-1])
            total[0] += 2.0 * leading * query.shape[-2] * key.shape[-2] * (query.shape[-1] + value.shape[-1])

    hooks = []
    for module in model.modules():
        if isinstance(module, nn.MultiheadAttention):
            hooks.append(module.register_forward_pre_hook(entering_multihead))
            hooks.append(module.register_forward_hook(attention_hook))
        elif isinstance(module, nn.Linear):
            hooks.append(module.register_forward_hook(linear_hook))
    was_training = model.training
    try:
        model.eval()  # no dropout: the probe must not consume the RNG stream training depends on
        with torch.no_grad(), _CountingAttention(sdpa_flops):
            model(*example)
    finally:
        model.train(was_training)
        for hook in hooks:
            hook.remove()
    return 3.0 * total[0] / max(example[0].shape[0], 1)


class _CountingAttention(TorchFunctionMode):
    """Calls ``count(query, key, value)`` for every ``scaled_dot_product_attention``, then runs it."""

    def __init__(self, count) -> None:
        super().__init__()
        self.count = count

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            names = ("query", "key", "value")
            self.count(*(args[i] if i < len(args) else kwargs[name] for i, name in enumerate(names)))
        return func(*args, **kwargs)


def flops_per_sample_or_zero(model: nn.Module, example: tuple[torch.Tensor, ...]) -> float:
    """``flops_per_sample``, or 0.0 when counting fails: counting is a nicety, an exotic op must never
    stop training (MFU is then reported as 0)."""
    try:
        return flops_per_sample(model, example)
    except Exception:  # noqa: BLE001
        return 0.0


def measure_peak_flops(
    device: torch.device, dtype: torch.dtype, *, size: int = 512, repeats: int = 8
) -> float:
    """Best-of-N matmul FLOP/s at ``dtype`` on ``device`` (the datasheet value on a known GPU)."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for (model_name, kind), peak in GPU_PEAK_FLOPS.items():
            if model_name in name and kind == dtype:
                return peak
        size = 8192
    a = torch.full((size, size), 0.5, dtype=dtype, device=device)
    b = torch.full((size, size), 0.25, dtype=dtype, device=device)
    torch.mm(a, b)  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        torch.mm(a, b)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best
