"""Model FLOPs and the device's peak matmul rate, for model FLOPs utilisation (MFU).

MFU = achieved model FLOP/s per device / peak matmul FLOP/s of the same device and dtype. FLOPs per
sample are counted once (forward + backward) with torch's FlopCounterMode on the unsharded model; the
CPU peak is measured at start-up with the worker's own threads, the GPU peak taken from the datasheet.
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

# Dense (no sparsity) datasheet peaks, FLOP/s, for the GPUs we expect to run on.
GPU_PEAK_FLOPS = {
    ("H100", torch.bfloat16): 989e12,
    ("H100", torch.float32): 67e12,
    ("H200", torch.bfloat16): 989e12,
    ("H200", torch.float32): 67e12,
    ("A100", torch.bfloat16): 312e12,
    ("A100", torch.float32): 19.5e12,
}


def flops_per_sample(model: nn.Module, example: tuple[torch.Tensor, ...], n_classes: int) -> float:
    """Forward + backward FLOPs per sample, counted on a copy (the model's RNG and grads stay untouched)."""
    from torch.utils.flop_counter import FlopCounterMode

    probe = copy.deepcopy(model).eval()
    batch = example[0].shape[0]
    counter = FlopCounterMode(display=False)
    with counter:
        logits = probe(*example)
        torch.nn.functional.cross_entropy(logits.float(), torch.zeros(batch, dtype=torch.long)).backward()
    return float(counter.get_total_flops()) / max(batch, 1)


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
