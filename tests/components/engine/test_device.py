"""Every rank's device and backend follow from the config, never from what a node happens to offer: a worker
asked for GPUs fails fast with the reason when CUDA is unusable instead of training on CPU with gloo (ranks on
other nodes would pick NCCL and the job would hang)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from ctpipe.components.engine.device import choose_device, gpus_per_rank
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config

CPU_ONLY = not torch.cuda.is_available()


@pytest.mark.skipif(not CPU_ONLY, reason="checks the behaviour where CUDA is not usable")
def test_asking_for_a_gpu_without_usable_cuda_fails_with_the_reason():
    with pytest.raises(ConfigError) as err:
        choose_device(local_rank=0, gpus=1)
    text = str(err.value)
    assert "kubernetes.worker_gpus" in text and "1" in text
    assert "gloo" in text and "kubernetes.worker_gpus=0" in text  # what would happen, and the fix
    # The reason names why CUDA is unusable here (this torch is a CPU build).
    assert "build without CUDA" in text


def test_no_gpus_asked_means_cpu_and_gloo_on_every_node():
    assert choose_device(local_rank=0, gpus=0) == (torch.device("cpu"), "gloo")


def test_local_processes_follow_the_machine():
    device, backend = choose_device(local_rank=0, gpus=None)
    assert (device.type, backend) == (("cuda", "nccl") if torch.cuda.is_available() else ("cpu", "gloo"))


def test_cluster_backends_take_the_gpu_count_from_the_config_local_runs_do_not():
    assert gpus_per_rank(load_config(overrides=["train.backend=pytorchjob", "kubernetes.worker_gpus=1"])) == 1
    assert gpus_per_rank(load_config(overrides=["train.backend=trainjob", "kubernetes.worker_gpus=0"])) == 0
    # The default config asks for a GPU per worker pod, yet `ctpipe run` trains on this machine's CPU.
    assert gpus_per_rank(load_config(overrides=["train.backend=local"])) is None


@pytest.mark.skipif(not CPU_ONLY, reason="checks the behaviour where CUDA is not usable")
def test_a_worker_asked_for_a_gpu_exits_before_joining_the_group(tmp_path):
    """The real worker entrypoint: it fails at once (no rendezvous wait), with the reason on stderr."""
    config = load_config(overrides=["train.backend=pytorchjob", "kubernetes.worker_gpus=1"])
    error_file = tmp_path / "error.json"
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1",
           "CTPIPE_ERROR_FILE": str(error_file), "MLFLOW_DISABLE_TELEMETRY": "true"}
    done = subprocess.run([sys.executable, "-m", "ctpipe.components.steps.train.worker", "--snapshot", str(tmp_path),
                           "--checkpoints", str(tmp_path / "ckpt"), "--config-json", config.to_json()],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "kubernetes.worker_gpus" in done.stderr
    assert json.loads(error_file.read_text())["type"] == "ConfigError"


@pytest.mark.parametrize(("settings", "expected"), [
    (["train.mixed_precision=bf16"], torch.bfloat16),
    (["train.mixed_precision=fp32", "train.backend=pytorchjob", "kubernetes.worker_gpus=1"], torch.float32),
    (["train.backend=pytorchjob", "kubernetes.worker_gpus=1"], torch.bfloat16),
    (["train.backend=trainjob", "kubernetes.worker_gpus=0"], torch.float32),
    ([], torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float32),
], ids=["bf16 asked", "fp32 asked", "auto on cluster GPUs", "auto on cluster CPUs", "auto on local ranks"])
def test_the_precision_the_ranks_will_compute_in_is_known_before_they_start(settings, expected):
    """What the sanity gate trains in, from a CPU step: the ranks' precision, decided by the config as their device is."""
    from ctpipe.components.engine.parallelize import planned_precision
    from ctpipe.components.run_config import load_config

    assert planned_precision(load_config(None, settings)) == expected
