"""Which device and process-group backend a rank uses: decided by the config, the same on every rank.

On a cluster each rank runs on its own node. Guessing per node ("CUDA if available, else CPU") lets a rank
on a node with an old driver, or a CPU node, pick gloo while its peers pick NCCL, and the job hangs in its
first collective. So a worker asked for GPUs (``kubernetes.worker_gpus > 0``) uses CUDA/NCCL or stops at
once with the reason, and one asked for none uses CPU/gloo even where a GPU is visible. Local processes
share one machine, so there the machine decides.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError


@dataclass
class Dist:
    """This process's place in the job: its rank among ``world_size``, and the device it computes on."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def gpus_per_rank(config: Config) -> int | None:
    """GPUs each rank was given on a cluster (``kubernetes.worker_gpus``); None for local processes."""
    return None if config.train.backend == "local" else config.kubernetes.worker_gpus


def cuda_unusable_reason() -> str | None:
    """Why CUDA cannot be used in this process, or None when it can."""
    if torch.cuda.is_available():
        return None
    if torch.version.cuda is None:
        return f"this torch ({torch.__version__}) is a build without CUDA (the -cpu trainer image?)"
    try:
        torch.cuda.init()  # raises with the driver's own reason (no driver, driver too old, ...)
    except Exception as err:  # noqa: BLE001 - the message is the point
        return f"{type(err).__name__}: {err}"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", os.environ.get("NVIDIA_VISIBLE_DEVICES"))
    return f"no CUDA device is visible (device count {torch.cuda.device_count()}, visible devices {visible!r})"


def choose_device(local_rank: int, gpus: int | None) -> tuple[torch.device, str]:
    """(device, process-group backend) for a rank given ``gpus`` from ``gpus_per_rank``; ConfigError if unusable."""
    if gpus == 0:
        return torch.device("cpu"), "gloo"
    reason = cuda_unusable_reason()
    if reason is None:
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        return device, "nccl"
    if gpus is None:
        return torch.device("cpu"), "gloo"
    built_for = f" (torch built for CUDA {torch.version.cuda})" if torch.version.cuda else ""
    raise ConfigError(
        f"invalid config value for 'kubernetes.worker_gpus': {gpus}, but CUDA is not usable in this worker: "
        f"{reason}{built_for}. Training would silently run on CPU with gloo "
        "while ranks on other nodes pick NCCL, and the job would hang. Run the -cuda trainer image on nodes "
        "with an NVIDIA driver new enough for that CUDA (kubernetes.node_selector / tolerations), or set "
        "kubernetes.worker_gpus=0 to train on CPU."
    )
