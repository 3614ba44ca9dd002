"""Trainer benchmark: the ctpipe worker against a bare FSDP2 loop, same model, global batch and world size.

    python benchmarks/trainer.py [--repeats 3] [--set train.max_steps=300 ...] [--no-ddp] [--example digits]
    python benchmarks/trainer.py --task causal_lm [--set task.options.size=small ...]

In one run, interleaved (the order alternates per repetition, since this machine's speed swings), it
measures (a) a bare FSDP2 loop — forward, backward, optimizer step (the same AdamW), nothing else — and (b) the ctpipe
worker with its default instrumentation (MLflow from rank 0 into SQLite, clipping with the NaN check,
the LR schedule, evaluation on the full validation split and checkpoints at the default intervals), and
optionally (c) the worker with ``train.strategy=ddp`` and (d) the worker with every block its own FSDP2
unit (``train.fsdp_unit_min_params=0``, the sharding before units were sized; ``--per-block``). Both time only the training loop (process start-up
and imports excluded, for both). It reports:

- ``overhead_ratio``: median over repetitions of (b samples/s) / (a samples/s), loop wall time
  including evaluation and checkpoints (goal >= 0.95);
- ``step_overhead_ratio``: the same with (b)'s training-step time only (clipping with the NaN check,
  schedule, metrics), i.e. without evaluation and checkpoints;
- ``overhead_ratio_vs_bare_clip`` / ``step_overhead_ratio_vs_bare_clip``: the same against (a') the bare
  loop that also clips by the global gradient norm with the worker's ``clip_grad_norm_`` (FSDP2: one
  all-reduce of a scalar per step, a collective the bare loop does not have); ``clipping_cost``: 1 - (a')/(a);
  ``eval_share``: the worker's evaluation time over its loop time;
- ``checkpoint_share``: one checkpoint save's time on the loop's critical path (the mean over the run's saves)
  over ``checkpoint_every`` training steps' time; ``in_loop_checkpoint_seconds`` (median of the saves inside the
  loop: staging and any wait for the save before) and ``last_checkpoint_seconds`` (the last save, which the end of
  the loop waits for whole) split it, from the run's MLflow metric;
- ``mfu``: the worker's model FLOPs utilisation (peak matmul FLOP/s measured at start-up);
- with ``--per-block``: ``sized_over_per_block``, the worker's samples/s with its sized units over
  per-block units (medians of pairs).

Both sides go through the run's task (``task.*`` config; ``--example digits`` trains the user's digits
CNN of ``examples/digits`` on its Parquet partitions instead of the tabular demo). With ``--task NAME``
(a built-in task with demo data of its own, e.g. ``causal_lm``) both loops train that task's model on
its demo data with the task's ``demo_settings``; for a sequence task it also prints tokens/s and
``lm_mfu`` from the task's analytic FLOPs per token (6 N + attention) over the same peak (on CPU that
peak is the worker's measured matmul rate, a nominal figure, not a datasheet one). The last line
printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def bare_worker(snapshot_dir: str, config_json: str, out: str, clip: str = "") -> None:
    """One rank of the bare loop: the same model, sharding and precision, and nothing else; with ``clip``
    also the worker's clipping by the global gradient norm (one all-reduce of a scalar per step)."""
    import torch
    import torch.distributed as dist

    from ctpipe.components.engine.parallelize import apply_fsdp, clip_grad_norm_, resolve_precision
    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.data.snapshot import load_snapshot
    from ctpipe.components.tasks import load_task

    cfg = Config.from_json(config_json)
    torch.set_num_threads(cfg.train.threads_per_worker)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    snapshot = load_snapshot(snapshot_dir)
    task = load_task(cfg.task)
    examples = task.codec.encode(snapshot.frame("train"), snapshot.state)
    torch.manual_seed(cfg.train.seed)
    model = task.model.build(cfg, snapshot.state)
    task.model.init(model, snapshot.state, examples.targets)
    model.to(device)
    # The same FSDP2 units as the worker (train.fsdp_unit_min_params), from the same function.
    apply_fsdp(
        model,
        task.model.shard_units(model),
        param_dtype=resolve_precision(cfg.train.mixed_precision, device),
        min_unit_params=cfg.train.fsdp_unit_min_params,
    )
    opt = torch.optim.AdamW(
        model.parameters(), lr=cfg.train.lr, weight_decay=cfg.train.weight_decay, foreach=True
    )
    shard = torch.arange(rank, len(examples), world)
    batch = cfg.train.batch_size
    per_epoch = len(shard) // batch
    generator = torch.Generator().manual_seed(cfg.train.seed)
    order = shard[torch.randperm(len(shard), generator=generator)]
    dist.barrier()
    start = time.perf_counter()
    for step in range(cfg.train.max_steps):
        if step % per_epoch == 0:
            order = shard[torch.randperm(len(shard), generator=generator)]
        idx = order[(step % per_epoch) * batch : (step % per_epoch + 1) * batch]
        part = examples.select(idx)
        inputs = tuple(x.to(device, non_blocking=True) for x in part.inputs)
        loss = task.objective.loss(model(*inputs), part.targets.to(device, non_blocking=True))
        loss.backward()
        if clip:
            clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if cuda:
        torch.cuda.synchronize(device)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        samples = cfg.train.max_steps * batch * world
        Path(out).write_text(json.dumps({"loop_seconds": seconds, "samples_per_second": samples / seconds}))
    dist.destroy_process_group()


def run_bare(snapshot_dir: str, config, work: Path, tag: str, clip: bool = False) -> dict:
    from ctpipe.components.steps.train.launchers.base import WorkerLaunch
    from ctpipe.components.steps.train.launchers.local import LocalLauncher

    out = work / f"bare-{tag}.json"
    threads = str(config.train.threads_per_worker)
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--bare-worker",
        snapshot_dir,
        config.to_json(),
        str(out),
        *(["clip"] if clip else []),
    ]
    launch = WorkerLaunch(
        job_name=f"bench-bare-{tag}",
        world_size=config.train.workers,
        command=command,
        env={"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads},
        deadline_seconds=1800,
    )
    LocalLauncher(echo=False).run(launch)
    return json.loads(out.read_text())


def run_ctpipe(snapshot_dir: str, config, work: Path, tag: str, tracking_uri: str | None) -> dict:
    """One run of the ctpipe worker; ``tracking_uri`` None: no MLflow (rank 0 gets the NullTracker)."""
    from ctpipe.components.steps.train.launch import train_model
    from ctpipe.components.steps.train.launchers.local import LocalLauncher

    run_id = None
    if tracking_uri:
        from ctpipe.components.lib.tracking import create_run, ensure_experiment

        run_id = create_run(tracking_uri, ensure_experiment(tracking_uri, "bench"), run_name=f"bench-{tag}", tags={})
    result = train_model(
        snapshot_dir,
        str(work / f"ckpt-{tag}"),
        config,
        tracking_uri=tracking_uri,
        mlflow_run_id=run_id,
        job_name=f"bench-{tag}",
        launcher=LocalLauncher(echo=False),
    )
    this = result.raw["this_run"]
    step_seconds = result.global_batch_size / result.samples_per_second
    per_save = _per_save_seconds(tracking_uri, run_id)
    return {
        # Each save's time on the loop's critical path, in step order (from the run's MLflow metric): the saves
        # inside the loop (staging, a wait for the save before), then the last, which the end of the loop waits for.
        "in_loop_checkpoint_seconds": statistics.median(per_save[:-1]) if len(per_save) > 1 else None,
        "last_checkpoint_seconds": per_save[-1] if per_save else None,
        "loop_seconds": this["loop_seconds"],
        "samples_per_second": this["steps"] * result.global_batch_size / this["loop_seconds"],
        "train_step_samples_per_second": result.samples_per_second,
        "checkpoint_seconds": this["checkpoint_seconds"] / max(this["checkpoints"], 1),
        "eval_seconds": this["eval_seconds"],
        "step_seconds": step_seconds,
        "mfu": result.mfu,
        "val_accuracy": result.final_metrics.get("val_accuracy"),
        "val_loss": result.final_metrics.get("val_loss"),
        "peak_flops": result.raw.get("peak_flops_per_device", 0.0),
    }


def _per_save_seconds(tracking_uri: str | None, run_id: str | None) -> list[float]:
    """The ``checkpoint_seconds`` the worker logged per save, in step order ([] without MLflow)."""
    if not (tracking_uri and run_id):
        return []
    import mlflow

    history = mlflow.MlflowClient(tracking_uri).get_metric_history(run_id, "checkpoint_seconds")
    return [m.value for m in sorted(history, key=lambda m: m.step)]


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--bare-worker":
        bare_worker(*sys.argv[2:6])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--no-ddp", action="store_true", help="skip the DDP comparison")
    parser.add_argument(
        "--per-block", action="store_true", help="also run the worker with every block its own FSDP2 unit"
    )
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=1000)
    parser.add_argument("--task", default=None, metavar="NAME", help="a built-in task with its own demo data")
    parser.add_argument(
        "--no-mlflow",
        action="store_true",
        help="the worker logs to no tracking server (for a GPU machine that has torch but not MLflow installed)",
    )
    parser.add_argument("--example", choices=["digits"], default=None,
                        help="benchmark the user task of examples/<name> on its own data")
    args = parser.parse_args(argv)

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.components.run_config import load_config
    from ctpipe.components.tasks import load_task
    from ctpipe.pipelines.local.train_alone import build_snapshot

    base: list[str] = []
    if args.example:
        # The example's task module must import here and in every worker process, as an installed package would.
        folder = str(Path(__file__).resolve().parents[1] / "examples" / args.example)
        sys.path.insert(0, folder)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (folder, os.environ.get("PYTHONPATH", "")) if p)
        base = ["data.key=id", "task.entrypoint=digits_task:make_task"]
    elif args.task:
        demo = load_task({"name": args.task}).demo
        base = [f"task.name={args.task}", *(demo.settings if demo else ())]
    config = load_config(None, base + args.overrides)
    ddp_config = load_config(None, base + args.overrides + ["train.strategy=ddp"])
    task = load_task(config.task)
    per_block_config = load_config(None, base + args.overrides + ["train.fsdp_unit_min_params=0"])
    variant_config = {"ctpipe": config, "ddp": ddp_config, "perblock": per_block_config}
    rows: dict[str, list[dict]] = {"bare": [], "bareclip": [], "ctpipe": [], "ddp": [], "perblock": []}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="ctpipe-bench-") as tmp:
        work = Path(tmp)
        if args.example:
            from write_partitions import write_partitions

            write_partitions(work / "data", days=args.days)
        elif args.task:
            if task.demo is None:
                raise SystemExit(f"task {args.task!r} has no demo data of its own (TaskSpec.demo): leave out --task")
            task.demo.write_data(str(work / "data"), days=args.days)
        else:
            write_demo_data(work / "data", days=args.days, rows_per_day=args.rows_per_day)
        snapshot_dir = str(build_snapshot(str(work / "data"), config, work / "snapshot").root)
        tracking_uri = None if args.no_mlflow else f"sqlite:///{work / 'mlflow.db'}"
        variants = ["bare", "bareclip", "ctpipe"] + ([] if args.no_ddp else ["ddp"]) + (["perblock"] if args.per_block else [])
        for rep in range(args.repeats):
            order = variants if rep % 2 == 0 else variants[::-1]
            for name in order:
                tag = f"{name}-{rep}"
                if name in ("bare", "bareclip"):
                    row = run_bare(snapshot_dir, config, work, tag, clip=name == "bareclip")
                else:
                    row = run_ctpipe(snapshot_dir, variant_config[name], work, tag, tracking_uri)
                rows[name].append(row)
                print(
                    f"rep {rep} {name:8s} {row['samples_per_second']:8.1f} samples/s (loop {row['loop_seconds']:.2f} s"
                    + (
                        f", eval {row['eval_seconds']:.2f} s, {row['checkpoint_seconds']:.3f} s per checkpoint)"
                        if not name.startswith("bare")
                        else ")"
                    ),
                    flush=True,
                )

    ratios = _pair_ratios(rows["ctpipe"], rows["bare"])
    step_ratios = _pair_ratios(rows["ctpipe"], rows["bare"], "train_step_samples_per_second")
    clip_ratios = _pair_ratios(rows["ctpipe"], rows["bareclip"])
    clip_step_ratios = _pair_ratios(rows["ctpipe"], rows["bareclip"], "train_step_samples_per_second")
    shares = [
        c["checkpoint_seconds"] / (config.train.checkpoint_every * c["step_seconds"]) for c in rows["ctpipe"]
    ]
    summary = {
        "overhead_ratio": statistics.median(ratios),
        "overhead_ratios": ratios,
        "step_overhead_ratio": statistics.median(step_ratios),
        # Against the bare loop that also clips by the global norm as the worker does (train.grad_clip):
        # what is left is the worker's own cost (schedule, NaN check, metrics, evaluation, checkpoints).
        "overhead_ratio_vs_bare_clip": statistics.median(clip_ratios),
        "step_overhead_ratio_vs_bare_clip": statistics.median(clip_step_ratios),
        "clipping_cost": 1 - statistics.median(_pair_ratios(rows["bareclip"], rows["bare"])),
        "eval_share": statistics.median(c["eval_seconds"] / c["loop_seconds"] for c in rows["ctpipe"]),
        "checkpoint_share": statistics.median(shares),
        "checkpoint_seconds": statistics.median(c["checkpoint_seconds"] for c in rows["ctpipe"]),
        "in_loop_checkpoint_seconds": _median_or_none(c["in_loop_checkpoint_seconds"] for c in rows["ctpipe"]),
        "last_checkpoint_seconds": _median_or_none(c["last_checkpoint_seconds"] for c in rows["ctpipe"]),
        "mfu": statistics.median(c["mfu"] for c in rows["ctpipe"]),
        "bare_samples_per_second": statistics.median(b["samples_per_second"] for b in rows["bare"]),
        "ctpipe_samples_per_second": statistics.median(c["samples_per_second"] for c in rows["ctpipe"]),
        "ctpipe_val_accuracy": _median_or_none(c["val_accuracy"] for c in rows["ctpipe"]),
        "ctpipe_val_loss": _median_or_none(c["val_loss"] for c in rows["ctpipe"]),
        "world_size": config.train.workers,
        "global_batch_size": config.train.batch_size * config.train.workers * config.train.grad_accum_steps,
        "steps": config.train.max_steps,
        "mixed_precision": config.train.mixed_precision,
        "repeats": args.repeats,
        "task": config.task.entrypoint or config.task.name,
        "mlflow": not args.no_mlflow,
        "device": _device_name(),
        "cpus": os.cpu_count(),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
    }
    if rows["ddp"]:
        summary["ddp_samples_per_second"] = statistics.median(d["samples_per_second"] for d in rows["ddp"])
        summary["ddp_over_fsdp"] = statistics.median(
            d["samples_per_second"] / c["samples_per_second"]
            for c, d in zip(rows["ctpipe"], rows["ddp"], strict=True)
        )
    lm = _language_model(config)
    tokens_per_example = int(lm.model_config.seq_len) if lm is not None else 0
    if tokens_per_example:
        summary.update(_sequence_figures(lm, config, summary, rows, tokens_per_example))
    if rows["perblock"]:
        summary["per_block_samples_per_second"] = statistics.median(
            r["samples_per_second"] for r in rows["perblock"]
        )
        summary["sized_over_per_block"] = statistics.median(
            c["samples_per_second"] / r["samples_per_second"]
            for c, r in zip(rows["ctpipe"], rows["perblock"], strict=True)
        )
    summary["fsdp_unit_min_params"] = config.train.fsdp_unit_min_params
    print(json.dumps(summary))
    return 0


def _pair_ratios(rows: list[dict], baseline: list[dict], key: str = "samples_per_second") -> list[float]:
    """Per repetition: ``rows``' ``key`` over the baseline's samples/s of the same repetition."""
    return [r[key] / b["samples_per_second"] for r, b in zip(rows, baseline, strict=True)]


def _median_or_none(values) -> float | None:
    found = [v for v in values if v is not None]
    return statistics.median(found) if found else None


def _device_name() -> str:
    """The GPU's name, or 'cpu': which machine a figure comes from."""
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


def _language_model(config):
    """The built-in language model's implementation (``CausalLM``), whose configured decoder states its size
    and FLOPs per token (benchmark facts, not parts of the task); None for any other task: unknown."""
    if config.task.entrypoint or config.task.name != "causal_lm":
        return None
    from ctpipe.components.tasks.causal_lm import CausalLM

    return CausalLM(**dict(config.task.options))


def _sequence_figures(lm, config, summary: dict, rows: dict, tokens: int) -> dict:
    """tokens/s of both loops and the model's MFU from the task's analytic FLOPs per token over the workers' peak."""
    import torch

    peak = statistics.median(c["peak_flops"] for c in rows["ctpipe"])
    ctpipe_tps = summary["ctpipe_samples_per_second"] * tokens
    per_token = lm.flops_per_token()
    return {
        "tokens_per_example": tokens,
        "bare_tokens_per_second": summary["bare_samples_per_second"] * tokens,
        "ctpipe_tokens_per_second": ctpipe_tps,
        "flops_per_token": per_token,
        "parameters": lm.parameter_count(),
        "peak_flops_per_worker": peak,
        "peak_is_nominal": not torch.cuda.is_available(),  # CPU: the measured matmul rate, not a datasheet peak
        "lm_mfu": per_token * ctpipe_tps / config.train.workers / peak if peak > 0 else 0.0,
    }


if __name__ == "__main__":
    sys.exit(main())
