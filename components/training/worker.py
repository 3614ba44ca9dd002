"""The training worker: one process per rank, started by a launcher (local processes or PyTorchJob pods).

    python -m components.training.worker --snapshot DIR --checkpoints DIR --config-json JSON \
        [--tracking-uri URI --mlflow-run-id ID]

It uses only the torch.distributed environment contract: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
(LOCAL_RANK picks the GPU and defaults to 0, as in PyTorchJob pods). It resumes from the latest complete
checkpoint under --checkpoints, and rank 0 writes ``train_result.json`` there when it finishes. Exit code 0
on success, 2 when a restart would fail the same way (a UserError or TrainingError: bad input, a non-finite
loss), 1 for any other failure (launchers may restart the job from its checkpoint).

``CTPIPE_TEST_FAULT`` is a TEST-ONLY fault hook (tests/test_training_*.py), never part of a user config:
``nan@STEP`` makes the loss NaN at optimizer step STEP, ``raise@STEP:RANK`` raises on RANK at STEP,
``exit@STEP:RANK`` kills RANK abruptly at STEP, ``kill@STEP:RANK`` sends RANK a SIGKILL at STEP (as the OOM
killer does), ``save_crash@STEP:RANK`` kills RANK in the middle of the checkpoint save of STEP (after its
shards, before the completion marker).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import sys
import time
import traceback
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from components.config import Config
from components.errors import ConfigError, TrainingError, UserError
from components.training import checkpointing as ckpt
from components.training.device import choose_device, gpus_per_rank
from components.training.launchers.base import PERMANENT_FAILURE_EXIT_CODE
from components.training.parallelize import parallelize, resolve_precision, uses_autocast
from components.training.step import build_optimizer, optimizer_step
from components.training.tracker import NullTracker, flatten, make_tracker

RESULT_FILE = "train_result.json"
ERROR_FILE_ENV = "CTPIPE_ERROR_FILE"
FAULT_ENV = "CTPIPE_TEST_FAULT"
LOG_EVERY = 10  # steps per all-reduced train-loss window
EVAL_BATCH = 2048
CLIP_WARNING_RATE = 0.5


# --- process setup -------------------------------------------------------------------------------


@dataclass
class Dist:
    """This process's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device


def init_distributed(timeout_minutes: float, gpus: int | None = None) -> Dist:
    """Join the process group from the env contract; the device and backend follow ``gpus`` (device.py)."""
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    device, backend = choose_device(local_rank, gpus)
    dist.init_process_group(
        backend,
        rank=rank,
        world_size=world_size,
        timeout=timedelta(minutes=timeout_minutes),
        device_id=device if device.type == "cuda" else None,
    )
    return Dist(rank, world_size, local_rank, device)


@dataclass
class Fault:
    """The test-only fault from CTPIPE_TEST_FAULT (see the module docstring)."""

    kind: str = ""
    step: int = -1
    rank: int | None = None

    @classmethod
    def from_env(cls) -> Fault:
        spec = os.environ.get(FAULT_ENV, "")
        if not spec:
            return cls()
        kind, _, where = spec.partition("@")
        step, _, rank = where.partition(":")
        return cls(kind, int(step), int(rank) if rank else None)

    def hits(self, kind: str, step: int, rank: int) -> bool:
        return self.kind == kind and self.step == step and self.rank in (None, rank)


# --- data ----------------------------------------------------------------------------------------


@dataclass
class Split:
    x_num: torch.Tensor
    x_cat: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return len(self.y)

    def batch(self, idx: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, ...]:
        parts = (self.x_num[idx], self.x_cat[idx], self.y[idx])
        if device.type == "cpu":
            return parts
        # As DataLoader(pin_memory=True) does: page-locked batches copy to the GPU asynchronously.
        return tuple(p.pin_memory().to(device, non_blocking=True) for p in parts)


def load_split(snapshot, split: str) -> Split:
    x_num, x_cat, y = snapshot.tensors(split)
    return Split(
        torch.tensor(x_num), torch.tensor(x_cat), torch.tensor(y)
    )  # copies: numpy views may be read-only


class BatchStream:
    """Per-rank micro-batches from a DistributedSampler (same seed on all ranks, set_epoch each epoch).

    The position (epoch, batch within the epoch) is part of every checkpoint, so resume continues with
    exactly the batches an uninterrupted run would have seen.
    """

    def __init__(self, n: int, *, batch_size: int, rank: int, world_size: int, seed: int) -> None:
        from torch.utils.data import DistributedSampler

        self.sampler = DistributedSampler(
            range(n), num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.batch_size = batch_size
        self.batches_per_epoch = len(self.sampler) // batch_size
        if self.batches_per_epoch == 0:
            raise ConfigError(
                f"invalid config value for 'train.batch_size': {batch_size} is larger than the {len(self.sampler)} "
                f"training rows each of the {world_size} workers gets; lower train.batch_size or train.workers"
            )
        self.epoch, self.position = 0, 0
        self._order: torch.Tensor | None = None

    def next_indices(self) -> torch.Tensor:
        if self.position >= self.batches_per_epoch:
            self.epoch, self.position, self._order = self.epoch + 1, 0, None
        if self._order is None:
            self.sampler.set_epoch(self.epoch)
            self._order = torch.tensor(list(iter(self.sampler)), dtype=torch.long)
        start = self.position * self.batch_size
        self.position += 1
        return self._order[start : start + self.batch_size]

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def restore(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._order = int(state["epoch"]), int(state["position"]), None


# --- evaluation ----------------------------------------------------------------------------------


@torch.no_grad()
def evaluate(model: nn.Module, val: Split, d: Dist, autocast) -> dict[str, float]:
    """Loss and accuracy on the FULL validation split: each rank scores an equal, padded shard."""
    model.eval()
    n = len(val)
    per_rank = math.ceil(n / d.world_size)
    idx = torch.arange(d.rank * per_rank, (d.rank + 1) * per_rank)
    weight = (idx < n).to(torch.float64)
    idx = idx.clamp(max=n - 1)  # padding rows count with weight 0; every rank runs the same batches
    totals = torch.zeros(3, dtype=torch.float64, device=d.device)
    for start in range(0, per_rank, EVAL_BATCH):
        b_idx, w = idx[start : start + EVAL_BATCH], weight[start : start + EVAL_BATCH].to(d.device)
        x_num, x_cat, y = val.batch(b_idx, d.device)
        with autocast():
            logits = model(x_num, x_cat)
        losses = F.cross_entropy(logits.float(), y, reduction="none").double()
        totals[0] += (losses * w).sum()
        totals[1] += ((logits.argmax(dim=1) == y).double() * w).sum()
        totals[2] += w.sum()
    dist.all_reduce(totals)
    model.train()
    return {"val_loss": float(totals[0] / totals[2]), "val_accuracy": float(totals[1] / totals[2])}


# --- the training run ----------------------------------------------------------------------------


@dataclass
class Progress:
    """Counters that survive a resume (saved in every checkpoint's meta)."""

    step: int = 0
    clipped_steps: int = 0
    samples: int = 0
    train_seconds: float = 0.0
    index: list[ckpt.IndexEntry] = field(default_factory=list)
    last_metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class Window:
    """Per-step values summed over the current logging window."""

    loss: float = 0.0
    steps: int = 0
    clipped: int = 0
    seconds: float = 0.0

    def add(self, loss: float, clipped: bool, seconds: float) -> None:
        self.loss, self.steps, self.clipped, self.seconds = (
            self.loss + loss,
            self.steps + 1,
            self.clipped + int(clipped),
            self.seconds + seconds,
        )


class Trainer:
    """Builds everything for one rank and runs the loop: step, log, evaluate, checkpoint."""

    def __init__(
        self, cfg: Config, snapshot_dir: str, checkpoint_dir: str, d: Dist, tracker: NullTracker
    ) -> None:
        self.cfg, self.t, self.d, self.tracker = cfg, cfg.train, d, tracker
        self.root = Path(checkpoint_dir)
        self.fault = Fault.from_env()
        self._load_data(snapshot_dir)
        self._build_model()
        self._build_optimizer()
        self.stream = BatchStream(
            len(self.train_data),
            batch_size=self.t.batch_size,
            rank=d.rank,
            world_size=d.world_size,
            seed=self.t.seed,
        )
        self.global_batch = self.t.batch_size * d.world_size * self.t.grad_accum_steps
        self.progress = Progress()
        self.resumed_from: int | None = None
        self.saved_step: int | None = None
        self.window = Window()
        # Timings of this process's share of the run (not carried over a resume).
        self.stats = {
            "steps": 0,
            "loop_seconds": 0.0,
            "eval_seconds": 0.0,
            "checkpoint_seconds": 0.0,
            "checkpoints": 0,
        }
        # Dropout differs per rank (different data, different masks) but is reproducible on resume.
        torch.manual_seed(self.t.seed + 1 + d.rank)
        self.peak_flops = self._measure_peak()

    def _load_data(self, snapshot_dir: str) -> None:
        """The train and validation splits as host tensors (batches are pinned on their way to a GPU)."""
        from components.data.snapshot import load_snapshot
        from components.models.tabular import InputSpec

        snapshot = load_snapshot(snapshot_dir)
        self.fingerprint = snapshot.fingerprint
        self.train_data, self.val = load_split(snapshot, "train"), load_split(snapshot, "val")
        if len(self.val) == 0:
            raise TrainingError("the validation split is empty: add data or raise data.val_fraction")
        n_classes = len(snapshot.preprocessing.classes)
        self.spec = InputSpec(self.train_data.x_num.shape[1], snapshot.preprocessing.cardinalities, n_classes)

    def _build_model(self) -> None:
        """The model from the same seed on every rank, head bias at the class prior, then parallelised."""
        from components.models.tabular import build_model, init_output_bias

        torch.manual_seed(self.t.seed)  # identical initial weights on every rank before sharding
        model = build_model(self.cfg.model, self.spec)
        n_classes = self.spec.n_classes
        prior = torch.bincount(self.train_data.y, minlength=n_classes).double() / len(self.train_data)
        init_output_bias(model, prior.float())
        self.n_params = sum(p.numel() for p in model.parameters())
        self.flops_per_sample = _flops_or_zero(model, (self.train_data.x_num[:8], self.train_data.x_cat[:8]))
        self.dtype = resolve_precision(self.t.mixed_precision, self.d.device)
        self.model = parallelize(
            model,
            strategy=self.t.strategy,
            device=self.d.device,
            compute_dtype=self.dtype,
            activation_checkpointing=self.t.activation_checkpointing,
            compile=self.t.compile,
        )
        autocast_on = uses_autocast(self.t.strategy, self.d.device, self.dtype)
        device_type, dtype = self.d.device.type, self.dtype
        self.autocast = (lambda: torch.autocast(device_type, dtype=dtype)) if autocast_on else nullcontext

    def _build_optimizer(self) -> None:
        """AdamW with warmup + cosine, stepped per optimizer step (components/training/step.py)."""
        self.optimizer, self.scheduler = build_optimizer(self.model, self.t)

    # -- start-up ---------------------------------------------------------------------------------

    def _measure_peak(self) -> float:
        """Peak matmul FLOP/s, measured on all ranks at once (they share the machine), averaged."""
        from components.training.throughput import measure_peak_flops

        dist.barrier()
        peak = torch.tensor(
            [measure_peak_flops(self.d.device, self.dtype)], dtype=torch.float64, device=self.d.device
        )
        dist.all_reduce(peak)
        return float(peak) / self.d.world_size

    def resume(self) -> None:
        """Continue from the latest complete checkpoint, if any; partial saves are ignored."""
        path = ckpt.latest_complete(self.root)
        if path is None:
            return
        meta, rank_state = ckpt.load_checkpoint(
            path, model=self.model, optimizer=self.optimizer, rank=self.d.rank
        )
        p = meta["progress"]
        self.progress = Progress(
            step=int(meta["step"]),
            clipped_steps=int(p["clipped_steps"]),
            samples=int(p["samples"]),
            train_seconds=float(p["train_seconds"]),
            index=[ckpt.IndexEntry.from_dict(e) for e in meta["index"]],
            last_metrics=dict(meta.get("metrics") or {}),
        )
        self.scheduler.load_state_dict({**self.scheduler.state_dict(), **meta["scheduler"]})
        if rank_state is not None and int(meta["world_size"]) == self.d.world_size:
            self.stream.restore(meta["data"])
            torch.set_rng_state(rank_state["rng_cpu"])
            if self.d.device.type == "cuda" and "rng_cuda" in rank_state:
                torch.cuda.set_rng_state(rank_state["rng_cuda"], self.d.device)
        else:
            # Another world size: the shards of the old epoch do not map onto ours; start the next epoch.
            self.stream.restore({"epoch": int(meta["data"]["epoch"]) + 1, "position": 0})
            torch.manual_seed(self.t.seed + 1 + self.d.rank + self.progress.step)
        self.resumed_from = self.saved_step = self.progress.step
        _log(self.d, f"resumed from {path.name} (step {self.progress.step})")

    # -- the loop ---------------------------------------------------------------------------------

    def train_step(self) -> tuple[float, float]:
        """One optimizer step over grad_accum_steps micro-batches; returns (local loss, global grad norm)."""
        accum, step = self.t.grad_accum_steps, self.progress.step
        micro_batches = (self.train_data.batch(self.stream.next_indices(), self.d.device) for _ in range(accum))
        loss_fn = _nan_loss if self.fault.hits("nan", step, self.d.rank) else F.cross_entropy
        result = optimizer_step(
            self.model, micro_batches, self.optimizer, self.scheduler, accum=accum, grad_clip=self.t.grad_clip,
            loss_fn=loss_fn, autocast=self.autocast, grad_sync=self._grad_sync,
        )
        grad_norm, loss_value = result.grad_norm, result.loss
        if not result.finite:
            what = "loss" if not math.isfinite(loss_value) else "gradient norm"
            raise TrainingError(
                f"non-finite {what} at step {step + 1} (loss={loss_value}, grad_norm={grad_norm}) on rank {self.d.rank}: "
                "training stopped at once. Lower train.lr, check the data for extreme values, or set "
                "train.mixed_precision=fp32."
            )
        return loss_value, grad_norm

    def _grad_sync(self, sync: bool):
        """Reduce gradients only on the last micro-batch of an accumulation."""
        if self.t.grad_accum_steps == 1:
            return nullcontext()
        if hasattr(self.model, "set_requires_gradient_sync"):  # FSDP2
            self.model.set_requires_gradient_sync(sync)
            return nullcontext()
        return nullcontext() if sync else self.model.no_sync()  # DDP

    def run(self) -> dict[str, Any]:
        """Train to max_steps with evaluation and checkpoints; return the result (meaningful on rank 0)."""
        t, prog, stats = self.t, self.progress, self.stats
        self.model.train()
        loop_start = time.perf_counter()
        while prog.step < t.max_steps:
            self._inject_step_fault()
            lr = self.optimizer.param_groups[0]["lr"]
            start = time.perf_counter()
            loss, grad_norm = self.train_step()
            elapsed = time.perf_counter() - start
            prog.step += 1
            prog.samples += self.global_batch
            prog.train_seconds += elapsed
            clipped = grad_norm > t.grad_clip
            prog.clipped_steps += int(clipped)
            self.window.add(loss, clipped, elapsed)
            self.tracker.log_metrics({"lr": lr, "grad_norm": grad_norm}, prog.step)
            if prog.step % LOG_EVERY == 0 or prog.step == t.max_steps:
                self._log_window()
            due_ckpt = prog.step % t.checkpoint_every == 0 or prog.step == t.max_steps
            if prog.step % t.eval_every == 0 or due_ckpt:
                start = time.perf_counter()
                prog.last_metrics = evaluate(self.model, self.val, self.d, self.autocast)
                stats["eval_seconds"] += time.perf_counter() - start
                self.tracker.log_metrics(prog.last_metrics, prog.step)
                _log(
                    self.d,
                    f"step {prog.step}: " + ", ".join(f"{k}={v:.4f}" for k, v in prog.last_metrics.items()),
                )
            if due_ckpt:
                self.save()
            stats["steps"] += 1
        stats["loop_seconds"] = time.perf_counter() - loop_start
        if self.saved_step != prog.step:
            # Decided from this rank's own state, never the file system: rank 0 may still be writing the
            # marker of the last save while another rank gets here, and save() is a collective.
            self.save()
        return self.result()

    def _inject_step_fault(self) -> None:
        step, rank = self.progress.step, self.d.rank
        if self.fault.hits("raise", step, rank):
            raise RuntimeError(f"injected failure on rank {rank} at step {step} ({FAULT_ENV})")
        if self.fault.hits("exit", step, rank):
            os._exit(17)
        if self.fault.hits("kill", step, rank):
            os.kill(os.getpid(), signal.SIGKILL)

    def _log_window(self) -> None:
        # One small all-reduce per window, not per step: the mean train loss over all ranks.
        w = self.window
        mean_loss = torch.tensor([w.loss / max(w.steps, 1)], dtype=torch.float64, device=self.d.device)
        dist.all_reduce(mean_loss)
        samples_per_s = w.steps * self.global_batch / w.seconds if w.seconds > 0 else 0.0
        self.tracker.log_metrics(
            {
                "train_loss": float(mean_loss) / self.d.world_size,
                "clip_rate": w.clipped / max(w.steps, 1),
                "samples_per_second": samples_per_s,
                "mfu": self._mfu(samples_per_s),
            },
            self.progress.step,
        )
        if w.steps >= LOG_EVERY and w.clipped == w.steps and self.progress.step > self.t.warmup_steps:
            _log(
                self.d,
                f"WARNING: gradient clipping fired on every step of the last {w.steps} (step {self.progress.step})",
            )
        self.window = Window()

    def _mfu(self, samples_per_second: float) -> float:
        if self.peak_flops <= 0:
            return 0.0
        return self.flops_per_sample * samples_per_second / self.d.world_size / self.peak_flops

    # -- checkpoints ------------------------------------------------------------------------------

    def save(self) -> None:
        """Checkpoint the current step, index its metrics, apply retention, rewrite index.json."""
        prog, sel = self.progress, self.cfg.select
        if prog.last_metrics and not any(e.step == prog.step for e in prog.index):
            prog.index = [e for e in prog.index if e.step < prog.step]
            prog.index.append(ckpt.IndexEntry(prog.step, dict(prog.last_metrics)))
        rank_state: dict[str, Any] = {"rng_cpu": torch.get_rng_state()}
        if self.d.device.type == "cuda":
            rank_state["rng_cuda"] = torch.cuda.get_rng_state(self.d.device)
        meta = {
            "step": prog.step,
            "world_size": self.d.world_size,
            "data": self.stream.state(),
            "scheduler": {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"},
            "metrics": prog.last_metrics,
            "progress": {
                "clipped_steps": prog.clipped_steps,
                "samples": prog.samples,
                "train_seconds": prog.train_seconds,
            },
            "index": [e.to_dict() for e in prog.index],
        }
        crash = (lambda: os._exit(18)) if self.fault.hits("save_crash", prog.step, self.d.rank) else None
        start = time.perf_counter()
        ckpt.save_checkpoint(
            self.root,
            prog.step,
            model=self.model,
            optimizer=self.optimizer,
            rank_state=rank_state,
            meta=meta,
            rank=self.d.rank,
            before_marker=crash,
        )
        if self.d.rank == 0:
            ckpt.apply_retention(
                self.root, prog.index, keep_best=self.t.keep_best, metric=sel.metric, mode=sel.direction
            )
            ckpt.write_index(
                self.root, prog.index, metric=sel.metric, mode=sel.direction, extra=self._index_extra()
            )
        self.saved_step = prog.step
        save_seconds = time.perf_counter() - start
        self.stats["checkpoint_seconds"] += save_seconds
        self.stats["checkpoints"] += 1
        self.tracker.log_metrics({"checkpoint_seconds": save_seconds}, prog.step)

    def _index_extra(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "model_config": asdict(self.cfg.model),
            "input_spec": asdict(self.spec),
            "data_fingerprint": self.fingerprint,
            "world_size": self.d.world_size,
            "dtype": str(self.dtype).replace("torch.", ""),
        }

    # -- the end ----------------------------------------------------------------------------------

    def final_weights_sha256(self) -> str:
        """Collective: hash of the consolidated full state dict (rank 0's value is the real one)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        full = get_model_state_dict(
            self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
        return ckpt.state_dict_sha256(full) if self.d.rank == 0 else ""

    def result(self) -> dict[str, Any]:
        prog, sel = self.progress, self.cfg.select
        ranked = ckpt.rank_entries([e for e in prog.index if e.kept], sel.metric, sel.direction)
        best = ranked[0] if ranked else None
        samples_per_s = prog.samples / prog.train_seconds if prog.train_seconds > 0 else 0.0
        clip_rate = prog.clipped_steps / max(prog.step, 1)
        warnings = []
        if clip_rate > CLIP_WARNING_RATE:
            warnings.append(
                f"gradient clipping fired on {clip_rate:.0%} of steps (train.grad_clip={self.t.grad_clip}): "
                "the learning rate may be too high or the clip threshold too low"
            )
        return {
            "steps": prog.step,
            "best_checkpoint": {"step": best.step, "metric": sel.metric, "value": best.metrics[sel.metric]}
            if best
            else None,
            "final_metrics": prog.last_metrics,
            "world_size": self.d.world_size,
            "strategy": self.t.strategy,
            "dtype": str(self.dtype).replace("torch.", ""),
            "device": self.d.device.type,
            "global_batch_size": self.global_batch,
            "samples_per_second": samples_per_s,
            "mfu": self._mfu(samples_per_s),
            "flops_per_sample": self.flops_per_sample,
            "peak_flops_per_device": self.peak_flops,
            "parameters": self.n_params,
            "clip_rate": clip_rate,
            "resumed_from_step": self.resumed_from,
            "warnings": warnings,
            "this_run": dict(self.stats),
        }


def _nan_loss(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The ``nan@STEP`` test fault: the step's loss becomes NaN."""
    return F.cross_entropy(logits, y) * float("nan")


def _flops_or_zero(model: nn.Module, example: tuple[torch.Tensor, ...]) -> float:
    from components.training.throughput import flops_per_sample

    try:
        return flops_per_sample(model, example)
    except Exception:  # counting is a nicety: an exotic op must never stop training
        return 0.0


def _log(d: Dist, message: str) -> None:
    if d.rank == 0:
        print(f"[train] {message}", flush=True)


def system_facts(d: Dist, trainer: Trainer) -> dict[str, Any]:
    return {
        "system.torch_version": torch.__version__,
        "system.world_size": d.world_size,
        "system.device": str(d.device) if d.device.type == "cpu" else torch.cuda.get_device_name(d.device),
        "system.dtype": str(trainer.dtype).replace("torch.", ""),
        "system.threads_per_worker": torch.get_num_threads(),
        "system.parameters": trainer.n_params,
        "train.effective_batch_size": trainer.global_batch,
    }


def train(
    cfg: Config,
    snapshot_dir: str,
    checkpoint_dir: str,
    *,
    tracking_uri: str | None,
    mlflow_run_id: str | None,
) -> dict[str, Any]:
    """The whole life of one rank: join, build, resume, train, hash, write the result; always clean up."""
    torch.set_num_threads(cfg.train.threads_per_worker)
    d = init_distributed(cfg.train.timeout_minutes, gpus_per_rank(cfg))
    tracker: NullTracker = NullTracker()
    try:
        tracker = make_tracker(d.rank, tracking_uri, mlflow_run_id)
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
        trainer = Trainer(cfg, snapshot_dir, checkpoint_dir, d, tracker)
        tracker.log_params({**flatten(cfg.to_dict()), **system_facts(d, trainer)})
        trainer.resume()
        # Move the ~10^6 objects of torch's start-up out of the collector's reach: otherwise a full
        # collection (0.2-0.3 s here) lands in the loop, typically in a checkpoint save.
        gc.collect()
        gc.freeze()
        result = trainer.run()
        result["final_weights_sha256"] = trainer.final_weights_sha256()
        if d.rank == 0:
            ckpt.write_json_atomic(Path(checkpoint_dir) / RESULT_FILE, result)
            tracker.log_artifact(Path(checkpoint_dir) / ckpt.INDEX_FILE, "training")
            tracker.set_tags(
                {"ctpipe.train.status": "finished"}
                | ({"ctpipe.train.warnings": "; ".join(result["warnings"])} if result["warnings"] else {})
            )
            for w in result["warnings"]:
                print(f"[train] WARNING: {w}", flush=True)
        return result
    except BaseException as err:
        try:
            tracker.set_tags(
                {"ctpipe.train.status": "failed", "ctpipe.train.error": f"{type(err).__name__}: {err}"}
            )
            index = Path(checkpoint_dir) / ckpt.INDEX_FILE
            if index.is_file():
                tracker.log_artifact(index, "training")
        except Exception:
            pass  # the original error matters more than a failed tag
        raise
    finally:
        try:
            tracker.close()
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()


def _write_error(err: BaseException) -> None:
    """Leave this rank's error where the launcher finds it (the launcher puts the first one on top)."""
    path = os.environ.get(ERROR_FILE_ENV)
    message = {
        "rank": int(os.environ.get("RANK", "0")),
        "type": type(err).__name__,
        "message": str(err),
        "time": time.time(),
    }
    if path:
        try:
            Path(path).write_text(json.dumps(message))
        except OSError:
            pass
    print(
        f"ctpipe-worker rank {message['rank']} failed: {message['type']}: {message['message']}",
        file=sys.stderr,
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m components.training.worker", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--snapshot", required=True, help="snapshot directory (train/val splits)")
    parser.add_argument("--checkpoints", required=True, help="checkpoint directory, shared by all ranks")
    parser.add_argument("--config-json", required=True, help="the resolved Config as JSON")
    parser.add_argument("--tracking-uri", default="", help="MLflow tracking URI (rank 0 logs there)")
    parser.add_argument("--mlflow-run-id", default="", help="the pipeline run's MLflow run id")
    args = parser.parse_args(argv)
    try:
        cfg = Config.from_json(args.config_json)
        train(
            cfg,
            args.snapshot,
            args.checkpoints,
            tracking_uri=args.tracking_uri or None,
            mlflow_run_id=args.mlflow_run_id or None,
        )
    except BaseException as err:
        traceback.print_exc()
        _write_error(err)
        # Launchers restart a job from its checkpoint unless a restart would fail the same way.
        return PERMANENT_FAILURE_EXIT_CODE if isinstance(err, UserError | TrainingError) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
