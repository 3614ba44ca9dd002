"""The software and hardware a training ran on, recorded so that a reproduction can say what differs.

    facts = platform_facts(device_type="cpu", world_size=2, dtype="float32", threads=1)
    differences(recorded, current)   # ["torch: recorded 2.13.0, here 2.14.0", ...]

PyTorch promises bit-identical results only on the same release, platform and settings (its "Reproducibility"
note): the torch, CUDA and cuDNN versions, the device kind, the CPU's vector unit (AVX2 and AVX512 kernels differ in
the last bits), the world size, the precision, the intra-op threads and the deterministic-algorithm switches.
The trainer records these in its checkpoint index; the export and the version's lineage carry them on.
"""

from __future__ import annotations

from typing import Any

# The facts compared before a reproduction starts: those known without starting a rank.
BEFORE_START = ("torch", "cuda", "cudnn", "cpu_capability", "device", "world_size")


def platform_facts(*, device_type: str, world_size: int, dtype: str, threads: int) -> dict[str, Any]:
    """This process's torch, CUDA, cuDNN, CPU capability and deterministic switches, with the given run facts."""
    import torch

    cudnn = torch.backends.cudnn
    return {
        "torch": str(torch.__version__),  # a TorchVersion object would not load back with weights_only
        "cuda": str(torch.version.cuda) if torch.version.cuda else None,  # None: a CPU build
        "cudnn": cudnn.version() if cudnn.is_available() else None,
        "cpu_capability": str(torch.backends.cpu.get_cpu_capability()),
        "device": device_type,
        "world_size": int(world_size),
        "dtype": dtype,
        "threads_per_worker": int(threads),
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "cudnn_benchmark": bool(cudnn.benchmark),
    }


def differences(recorded: dict[str, Any], current: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[str]:
    """One line per fact (of ``keys``, default every recorded one) whose recorded value is not the current one."""
    names = keys if keys is not None else tuple(recorded)
    return [f"{name}: recorded {recorded[name]!r}, here {current.get(name)!r}"
            for name in names if name in recorded and recorded[name] != current.get(name)]
