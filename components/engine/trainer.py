"""One rank's training run: builds the data, model and optimizer, then steps, logs, evaluates and checkpoints.

``Trainer`` is what ``worker.train()`` drives once the process group is up: ``resume()`` continues from the
latest complete checkpoint, ``run()`` trains to ``train.max_steps`` and returns the result rank 0 writes.
The model knows nothing of ranks (``parallelize.py`` shards it); the step itself is ``step.py``.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.engine.data import ShardStream, train_stream
from ctpipe.components.engine.device import Dist
from ctpipe.components.engine.hooks import training_hooks
from ctpipe.components.engine.loss_eval import check_reported, evaluate, val_shard
from ctpipe.components.engine.parallelize import parallelize, resolve_precision, sync_buffers, uses_autocast
from ctpipe.components.engine.progress import Progress, ProgressLine, Unsettled, Window
from ctpipe.components.engine.saving import CheckpointWriter
from ctpipe.components.engine.step import build_optimizer, optimizer_step_unsynced
from ctpipe.components.engine.throughput import flops_per_sample_or_zero
from ctpipe.components.engine.tracker import NullTracker
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.platform_facts import platform_facts
from ctpipe.components.lib.tracking.log_step import flatten_params
from ctpipe.components.tasks import load_task, task_record
from ctpipe.components.tasks.code_identity import task_code_identity

LOG_EVERY = 10  # steps per logged window (train loss all-reduced; grad norm mean and max, lr, throughput)
CLIP_WARNING_RATE = 0.5


class Trainer:
    """Builds everything for one rank and runs the loop: step, log, evaluate, checkpoint."""

    def __init__(
        self, cfg: Config, snapshot_dir: str, checkpoint_dir: str, d: Dist, tracker: NullTracker
    ) -> None:
        self.cfg, self.t, self.d, self.tracker = cfg, cfg.train, d, tracker
        self.root = Path(checkpoint_dir)
        self.task = load_task(cfg.task)
        # Hashed once (recorded in each checkpoint's identity): the source does not change under a running job.
        self.task_code = task_code_identity(task_record(cfg.task))
        self.hooks = training_hooks()  # no-ops unless CTPIPE_HOOKS (or a test fault) names some
        self._load_data(snapshot_dir)
        if self.task.codec.rowwise:  # a small table: train.max_epochs passes, fewer than max_steps (run_sections.py)
            self.t = self.t.for_examples(len(self._init_targets), d.world_size)
        self._build_model()
        self._build_optimizer()
        self.writer = CheckpointWriter()  # saves off the steps' critical path (saving.py)
        self.global_batch = self.t.batch_size * d.world_size * self.t.grad_accum_steps
        self.progress = Progress()
        self.resumed_from: int | None = None
        self.warnings: list[str] = []  # for the result: damaged checkpoints skipped at resume
        self.saved_step: int | None = None
        self.window = Window()
        self._unsettled = Unsettled()  # read at the next boundary (``_settle``), never one step at a time
        self._clock = 0.0  # where the training time since the last boundary began
        # Timings (not kept over a resume); checkpoint_seconds: on the loop's critical path, *_write_: beside it.
        self.stats = {"steps": 0, "loop_seconds": 0.0, "eval_seconds": 0.0, "checkpoint_seconds": 0.0,
                      "checkpoint_write_seconds": 0.0, "checkpoints": 0}
        # Dropout differs per rank (different data, different masks) but is reproducible on resume.
        torch.manual_seed(self.t.seed + 1 + d.rank)
        self.peak_flops = self._measure_peak()

    def _load_data(self, snapshot_dir: str) -> None:
        """The validation split and the train split (or, above train.in_memory_rows, a reader of this rank's
        shard of it, loaded per epoch) as host tensors (batches are pinned on their way to a GPU)."""
        from ctpipe.components.lib.data.snapshot import load_snapshot

        snapshot = load_snapshot(snapshot_dir)
        self.fingerprint = snapshot.fingerprint
        self.state = snapshot.state
        self.stream, self._init_targets, self._example = train_stream(
            snapshot, self.task, in_memory_rows=self.t.in_memory_rows, batch_size=self.t.batch_size,
            rank=self.d.rank, world_size=self.d.world_size, seed=self.t.seed,
        )
        self.val = val_shard(snapshot, self.task, self.d)
        if len(self.val) == 0:
            raise TrainingError("the validation split is empty: add data or raise data.val_fraction")

    def _build_model(self) -> None:
        """The model from the same seed on every rank, initialised by the task (e.g. head bias at the class
        prior), then parallelised with the task's units."""
        torch.manual_seed(self.t.seed)  # identical initial weights on every rank before sharding
        model = self.task.model.build(self.cfg, self.state)
        self.task.model.init(model, self.state, self._init_targets)
        del self._init_targets  # on the sharded path a copy of every train row's target: not kept
        self.n_params = sum(p.numel() for p in model.parameters())
        self.flops_per_sample = flops_per_sample_or_zero(model, self._example)
        self.dtype = resolve_precision(self.t.mixed_precision, self.d.device)
        self.model = parallelize(
            model,
            units=self.task.model.shard_units(model),
            strategy=self.t.strategy,
            device=self.d.device,
            compute_dtype=self.dtype,
            activation_checkpointing=self.t.activation_checkpointing,
            compile=self.t.compile,
            fsdp_unit_min_params=self.t.fsdp_unit_min_params,
        )
        autocast_on = uses_autocast(self.t.strategy, self.d.device, self.dtype)
        device_type, dtype = self.d.device.type, self.dtype
        self.autocast = (lambda: torch.autocast(device_type, dtype=dtype)) if autocast_on else nullcontext

    def _build_optimizer(self) -> None:
        """AdamW with warmup + cosine, stepped per optimizer step (components/engine/step.py)."""
        self.optimizer, self.scheduler = build_optimizer(self.model, self.t)

    # -- start-up ---------------------------------------------------------------------------------

    def _measure_peak(self) -> float:
        """Peak matmul FLOP/s, measured on all ranks at once (they share the machine), averaged."""
        from ctpipe.components.engine.throughput import measure_peak_flops

        dist.barrier()
        peak = torch.tensor(
            [measure_peak_flops(self.d.device, self.dtype)], dtype=torch.float64, device=self.d.device
        )
        dist.all_reduce(peak)
        return float(peak) / self.d.world_size

    def resume(self) -> None:
        """Continue from the latest complete checkpoint whose bytes match their digests, if any; partial
        saves are ignored, damaged ones named and dropped (the steps after the newest intact one are trained
        again, bit for bit as the first time)."""
        # Rank 0 reads and hashes the files once for the job; every rank gets its verdict.
        found = [ckpt.damaged_checkpoints(self.root) if self.d.rank == 0 else None]
        dist.broadcast_object_list(found, src=0)
        damaged: dict[Path, str] = found[0]
        path = max((p for p in ckpt.checkpoint_dirs(self.root) if ckpt.is_complete(p) and p not in damaged),
                   key=ckpt.step_of, default=None)
        for bad, what in damaged.items():
            message = (f"checkpoint {bad} is damaged ({what}): skipped and removed, "
                       + (f"resuming from {path.name}" if path is not None else "training from the start"))
            self.warnings.append(message)
            log_rank0(self.d, f"WARNING: {message}")
        # Every rank has chosen (above, from the same verdict) before rank 0 un-marks them; retention then
        # deletes them as partial saves.
        ckpt.barrier()
        if self.d.rank == 0:
            for bad in damaged:
                (bad / ckpt.COMPLETE_MARKER).unlink(missing_ok=True)
        if path is None:
            return
        ckpt.refuse_another_training(path, self._identity())  # every rank, before loading anything
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
        log_rank0(self.d, f"resumed from {path.name} (step {self.progress.step})")

    def _identity(self) -> dict[str, Any]:
        from dataclasses import asdict

        return ckpt.run_identity(
            data_fingerprint=self.fingerprint, train_rows=self.stream.n, task=task_record(self.cfg.task),
            model=asdict(self.cfg.model), train=asdict(self.cfg.train), dtype=str(self.dtype).replace("torch.", ""),
            sharded=isinstance(self.stream, ShardStream), split=ckpt.split_identity(self.cfg.data),
            task_code=self.task_code,
        )

    # -- the loop ---------------------------------------------------------------------------------

    def train_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step over grad_accum_steps micro-batches; returns (local loss, global grad norm) as 0-dim
        tensors on the device: no host sync here (``_settle`` reads them, and stops a non-finite run)."""
        accum, step = self.t.grad_accum_steps, self.progress.step
        # A ShardStream reads the next epoch's shard inside the first step of that epoch: timed as training.
        micro_batches = (self.stream.next_batch(self.d.device) for _ in range(accum))
        loss_fn = self.hooks.loss_fn(step, self.d.rank, self.task.objective.loss)
        return optimizer_step_unsynced(self.model, micro_batches, self.optimizer, self.scheduler, accum=accum,
                                       grad_clip=self.t.grad_clip, loss_fn=loss_fn, autocast=self.autocast,
                                       grad_sync=self._grad_sync)

    def _settle(self) -> None:
        """At a boundary: the unsettled steps read in one host sync; a non-finite one stops the run there, before
        anything after it is evaluated or saved."""
        if self.d.device.type == "cuda":
            torch.cuda.synchronize(self.d.device)  # the steps' time ends when the device has done them
        seconds = time.perf_counter() - self._clock
        bad = self._unsettled.settle(self.progress, self.window, grad_clip=self.t.grad_clip, seconds=seconds)
        if bad is not None:
            step, loss, grad_norm = bad
            what = "loss" if not math.isfinite(loss) else "gradient norm"
            raise TrainingError(
                f"non-finite {what} at step {step} (loss={loss}, grad_norm={grad_norm}) on rank {self.d.rank}: "
                "training stopped before anything after it was evaluated or saved. Lower train.lr, check the data "
                "for extreme values, or set train.mixed_precision=fp32."
            )

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
        prog, stats = self.progress, self.stats
        # Before the first step: checkpoints are indexed and kept by select.metric (loss_eval.py).
        check_reported(self.model, self.val, self.d, self.autocast, self.task, self.cfg.select.metric)
        if self.resumed_from is not None:
            # A crash after the marker of the resumed checkpoint may have skipped its retention and index.json,
            # and a run resumed at its last step saves nothing more: finish that (idempotent) bookkeeping now,
            # once select.metric is known to be reported (retention by an unknown metric would keep only the latest).
            self._retain_and_index()
        self.model.train()
        loop_start = self._clock = time.perf_counter()
        try:
            self._loop()
            if self.saved_step != prog.step:
                # Decided from this rank's own state, never the file system: rank 0 may still be writing the
                # marker of the last save while another rank gets here, and save() is a collective.
                self.save()
            self._finish_save()
        except BaseException:
            self.writer.abandon()  # a save in flight may still complete (its state was taken before the error)
            raise
        finally:
            self.writer.close()
        stats["loop_seconds"] = time.perf_counter() - loop_start
        stats["checkpoint_write_seconds"] = self.writer.write_seconds
        stats.update(self.stream.read_stats())
        return self.result()

    def _loop(self) -> None:
        """Step to ``train.max_steps``; at each boundary: settle the steps, log, evaluate, start a checkpoint."""
        t, prog, stats = self.t, self.progress, self.stats
        while prog.step < t.max_steps:
            self.hooks.before_step(prog.step, self.d.rank)
            lr = self.optimizer.param_groups[0]["lr"]
            loss, grad_norm = self.train_step()
            prog.step += 1
            prog.samples += self.global_batch
            stats["steps"] += 1
            self._unsettled.add(lr, loss, grad_norm)
            # Per window, not per step: a metric batch sent to the store mid-loop costs every rank a
            # share of its step time (GIL and CPU); 1,200 points a run was ~8 % of the default's steps.
            log_due = prog.step % LOG_EVERY == 0 or prog.step == t.max_steps
            due_ckpt = prog.step % t.checkpoint_every == 0 or prog.step == t.max_steps
            due_eval = prog.step % t.eval_every == 0 or due_ckpt
            if not (log_due or due_eval):
                continue
            self._settle()
            self.writer.raise_if_failed()  # a save that failed stops the run here, not at the next save
            if log_due:
                self._log_window()
            if due_eval:
                start = time.perf_counter()
                sync_buffers(self.model)  # every rank validates the model the checkpoint will hold
                prog.last_metrics = evaluate(self.model, self.val, self.d, self.autocast, self.task)
                stats["eval_seconds"] += time.perf_counter() - start
                self.tracker.log_metrics(prog.last_metrics, prog.step)
                log_rank0(
                    self.d,
                    f"step {prog.step}: " + ", ".join(f"{k}={v:.4f}" for k, v in prog.last_metrics.items()),
                )
            if due_ckpt:
                self.save()
            self._clock = time.perf_counter()  # the next steps' time starts after the boundary's work

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
                "grad_norm": w.grad_norm / max(w.steps, 1),
                "grad_norm_max": w.grad_norm_max,
                "lr": w.lr,
                "samples_per_second": samples_per_s,
                "mfu": self._mfu(samples_per_s),
            },
            self.progress.step,
        )
        prog = self.progress
        per_step = prog.train_seconds / max(prog.step, 1)
        log_rank0(self.d, ProgressLine(prog.step, self.t.max_steps, float(mean_loss) / self.d.world_size,
                                       samples_per_s, per_step * (self.t.max_steps - prog.step)).text())
        if w.steps >= LOG_EVERY and w.clipped == w.steps and self.progress.step > self.t.warmup_steps:
            log_rank0(
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
        prog = self.progress
        self._finish_save()  # at most one save in flight; its retention and index are done before this one's
        start = time.perf_counter()
        sync_buffers(self.model)
        if prog.last_metrics and not any(e.step == prog.step for e in prog.index):
            prog.index = [e for e in prog.index if e.step < prog.step]
            prog.index.append(ckpt.IndexEntry(prog.step, dict(prog.last_metrics)))
        rank_state: dict[str, Any] = {"rng_cpu": torch.get_rng_state()}
        if self.d.device.type == "cuda":
            rank_state["rng_cuda"] = torch.cuda.get_rng_state(self.d.device)
        meta = {
            "step": prog.step, "world_size": self.d.world_size, "data": self.stream.state(),
            "scheduler": {k: v for k, v in self.scheduler.state_dict().items() if k != "lr_lambdas"},
            "metrics": prog.last_metrics,
            "progress": {"clipped_steps": prog.clipped_steps, "samples": prog.samples,
                         "train_seconds": prog.train_seconds},
            "index": [e.to_dict() for e in prog.index], "identity": self._identity(),
        }
        before_marker = self.hooks.before_marker(prog.step, self.d.rank)
        state, step = self.writer.stage(self.model, self.optimizer), prog.step  # a copy: no step waits for it

        def write() -> None:  # in the writer's thread, beside the next steps
            ckpt.save_checkpoint(self.root, step, model=self.model, optimizer=self.optimizer, rank_state=rank_state,
                                 meta=meta, rank=self.d.rank, before_marker=before_marker, state=state,
                                 group=self.writer.group)
            self.hooks.after_marker(step, self.d.rank)
            self._retain_and_index()

        self.writer.start(write)
        self.saved_step = step
        self._started_save = (step, time.perf_counter() - start)

    def _finish_save(self) -> None:
        """Wait for the checkpoint in flight, if any (before the next save starts, and at the end)."""
        waited = self.writer.finish()
        if waited is None:
            return
        step, starting = self._started_save
        self.stats["checkpoint_seconds"] += starting + waited
        self.stats["checkpoints"] += 1
        self.tracker.log_metrics({"checkpoint_seconds": starting + waited}, step)

    def _retain_and_index(self) -> None:
        """Rank 0: retention, then index.json, from this rank's index (after a save, and on resume)."""
        if self.d.rank == 0:
            sel = self.cfg.select
            ckpt.apply_retention(
                self.root, self.progress.index, keep_best=self.t.keep_best, metric=sel.metric, mode=sel.direction
            )
            ckpt.write_index(
                self.root, self.progress.index, metric=sel.metric, mode=sel.direction, extra=self._index_extra()
            )

    def _index_extra(self) -> dict[str, Any]:
        from dataclasses import asdict

        dtype, world = str(self.dtype).replace("torch.", ""), self.d.world_size
        # platform: what a reproduction compares before it starts (``ctpipe models reproduce``).
        return {"model_config": asdict(self.cfg.model), "task": task_record(self.cfg.task),
                "data_fingerprint": self.fingerprint, "world_size": world, "dtype": dtype,
                "platform": platform_facts(device_type=self.d.device.type, world_size=world, dtype=dtype,
                                           threads=torch.get_num_threads())}

    # -- the end ----------------------------------------------------------------------------------

    def system_facts(self) -> dict[str, Any]:
        """Facts about this run's hardware and model, logged as ``system.*`` params beside the config; the model as
        its task describes it (``system.model.*``: the config's ``model`` section is the tabular models' only)."""
        d = self.d
        return {
            **flatten_params(self.task.describe_model(self.cfg, self.state), "system.model."),
            "system.torch_version": torch.__version__,
            "system.world_size": d.world_size,
            "system.device": str(d.device) if d.device.type == "cpu" else torch.cuda.get_device_name(d.device),
            "system.dtype": str(self.dtype).replace("torch.", ""),
            "system.threads_per_worker": torch.get_num_threads(),
            "system.parameters": self.n_params,
            "train.effective_batch_size": self.global_batch,
        }

    def final_weights_sha256(self) -> str:
        """Collective: hash of the consolidated full state dict (rank 0's value is the real one)."""
        return ckpt.full_weights_sha256(self.model, self.d.rank)

    def result(self) -> dict[str, Any]:
        prog, sel = self.progress, self.cfg.select
        ranked = ckpt.rank_entries([e for e in prog.index if e.kept], sel.metric, sel.direction)
        best = ranked[0] if ranked else None
        samples_per_s = prog.samples / prog.train_seconds if prog.train_seconds > 0 else 0.0
        clip_rate = prog.clipped_steps / max(prog.step, 1)
        warnings = list(self.warnings)
        if clip_rate > CLIP_WARNING_RATE:
            warnings.append(
                f"gradient clipping fired on {clip_rate:.0%} of steps (train.grad_clip={self.t.grad_clip}): "
                "the learning rate may be too high or the clip threshold too low"
            )
        return {
            "steps": prog.step,
            "best_checkpoint": {"step": best.step, "metric": sel.metric, "value": best.metrics[sel.metric]}
            if best else None,
            "final_metrics": prog.last_metrics,
            "world_size": self.d.world_size, "strategy": self.t.strategy,
            "dtype": str(self.dtype).replace("torch.", ""), "device": self.d.device.type,
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


def log_rank0(d: Dist, message: str) -> None:
    """Print ``message`` once for the job (from rank 0), as the worker's own log line."""
    if d.rank == 0:
        print(f"[train] {message}", flush=True)
