"""Scale benchmark: seconds and peak memory of validation, snapshot and one training epoch as rows grow.

    python benchmarks/scale.py --rows 1000000,4000000,16000000 [--rows-per-partition 250000]
                               [--batch-size 2048] [--max-steps N] [--train-in-memory-rows N]
                               [--steps validation,snapshot,train_epoch] [--out DIR] [--keep]
    python benchmarks/scale.py --engine spark [--rows 4000000,16000000,64000000]   # benchmarks/scale_spark.py

For each row count it writes demo-schema partitions (``components/lib/data/demo.py``'s generator, one
partition of ``--rows-per-partition`` rows at a time, so generating is itself bounded), then runs each
step in a fresh interpreter, as a KFP step runs in its own pod:

- ``validation``: ``validate_data`` (read, checks, GX suite, and the snapshot it writes), with its phases;
- ``snapshot``: ``build_snapshot`` alone (read, split, write: what ``ctpipe train --data`` does first);
- ``train_epoch``: ``train_model`` at world size 2 (local launcher, gloo) for one epoch of the train split
  (``--max-steps`` caps it; the JSON says how many steps ran), evaluating and checkpointing once at the end.

Memory is sampled every 50 ms over the step's whole process tree from ``/proc`` (Linux): ``peak_rss_mb`` is the
largest resident set of any one process (what a pod's memory limit must hold: every rank is its own
pod), ``peak_tree_rss_mb`` the largest sum over the tree at one moment. Timings on a shared machine are
noisy; ``load_1m`` records the machine's load when each step started, and ``cpu_s`` the CPU seconds the
step's processes used (user + system, from ``getrusage``), which load does not inflate. The last line printed is one JSON
object; ``linearity`` is (CPU seconds at the largest size / at the one before) / (rows ratio) per step.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

STEP = r"""
import json, sys, time
from pathlib import Path
step, data, out, overrides = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
from ctpipe.components.lib.config import Config
cfg = Config.from_dict(overrides)
t = time.perf_counter()
if step == "validation":
    from ctpipe.components.steps.validate_data.validate import validate_data
    r = validate_data(data, cfg, snapshot_dir=out + "/snapshot", data_docs_path=out + "/docs.html",
                      report_path=out + "/report.md", tracking_uri="", mlflow_run_id="")
    summary = json.loads((Path(out) / "snapshot" / "validation.json").read_text())
    extra = {"rows": r.rows, "warnings": [w[:160] for w in r.warnings], "phases_s": {k: round(v, 2) for k, v in summary["seconds"].items()}}
elif step == "snapshot":
    from ctpipe.pipelines.local.train_alone import build_snapshot
    build_snapshot(data, cfg, out + "/snapshot-only")
    extra = {}
else:
    from ctpipe.components.steps.train.launch import train_model
    from ctpipe.components.steps.train.launchers.local import LocalLauncher
    r = train_model(out + "/snapshot", out + "/checkpoints", cfg, tracking_uri=None, mlflow_run_id=None,
                    job_name="scale", launcher=LocalLauncher(echo=False))
    run = r.raw.get("this_run", {})
    extra = {"steps": cfg.train.max_steps, "metrics": r.final_metrics,
             "sharded": "shard_rows_read" in run, **{k: run[k] for k in ("shard_rows_read", "shard_load_seconds") if k in run}}
print(json.dumps({"inner_s": time.perf_counter() - t, **extra}))
"""


def write_rows(out: Path, rows: int, rows_per_partition: int, seed: int = 0) -> int:
    """Demo-schema partitions holding ``rows`` rows in all, one bounded partition at a time; returns their count."""
    from ctpipe.components.lib.data.demo import START_DATE, generate_day

    written, day = 0, 0
    while written < rows:
        n = min(rows_per_partition, rows - written)
        frame = generate_day(day, n, seed, drifted=False, key_offset=written)
        part = out / f"date={(START_DATE + dt.timedelta(days=day)).isoformat()}" / "part-0.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(part, index=False)
        written, day = written + n, day + 1
    return day


def _tree(pid: int) -> list[tuple[int, str, int, float]]:
    """(pid, role, resident bytes, CPU seconds so far) of ``pid`` and every descendant (from /proc; vanished
    processes are skipped). Role: ``jvm`` (Spark's driver JVM, which holds the executors in local mode),
    ``python_worker`` (Spark's Python workers), else ``driver`` (the step's own Python process and helpers)."""
    out, todo = [], [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            status = Path(f"/proc/{p}/status").read_text()
            rss = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) * 1024
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / tick
            role = "jvm" if "java" in cmd.split(" ")[0] else "python_worker" if "pyspark" in cmd else "driver"
            out.append((p, role, rss, cpu))
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, StopIteration, ValueError, IndexError):
            continue
    return out


def _tree_rss(pid: int) -> list[int]:
    """Resident bytes of ``pid`` and every descendant."""
    return [rss for _, _, rss, _ in _tree(pid)]


def measure(step: str, data: Path, out: Path, overrides: dict) -> dict:
    """Run one step in a fresh interpreter; its wall time and the peak RSS of its process tree."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-c", STEP, step, str(data), str(out), json.dumps(overrides)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    peak_one = peak_tree = 0
    peak_role: dict[str, int] = {}
    cpu_of: dict[int, float] = {}  # each process's CPU seconds when last seen (JVMs and workers are not waited for)
    while proc.poll() is None:
        found = _tree(proc.pid)
        rss = [r for _, _, r, _ in found]
        peak_one, peak_tree = max(peak_one, max(rss, default=0)), max(peak_tree, sum(rss))
        for p, role, r, c in found:
            peak_role[role] = max(peak_role.get(role, 0), r)
            cpu_of[p] = max(cpu_of.get(p, 0.0), c)
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = max((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), sum(cpu_of.values()))
    if proc.returncode != 0:
        raise SystemExit(f"{step} failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    mb = 1024 * 1024
    return {"step": step, "seconds": round(wall, 2), "cpu_s": round(cpu, 1), "peak_rss_mb": round(peak_one / mb),
            "peak_tree_rss_mb": round(peak_tree / mb), "peak_rss_mb_by_role": {k: round(v / mb) for k, v in peak_role.items()},
            "load_1m": round(load, 2), **result}


def run_size(rows: int, args: argparse.Namespace, work: Path) -> dict:
    data, out = work / f"data-{rows}", work / f"out-{rows}"
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    partitions = write_rows(data, rows, args.rows_per_partition)
    generate_s = time.perf_counter() - t
    disk_mb = sum(f.stat().st_size for f in data.rglob("*.parquet")) / 1024 / 1024
    base = {"data": {"key": "customer_id"}}
    wanted = set(args.steps.split(","))
    steps = [measure("validation", data, out, base)]  # always: training reads the snapshot it writes
    if "snapshot" in wanted:
        steps.append(measure("snapshot", data, out, base))
    if "train_epoch" not in wanted:
        if not args.keep:
            shutil.rmtree(data), shutil.rmtree(out)
        return {"rows": rows, "partitions": partitions, "parquet_mb": round(disk_mb, 1),
                "generate_s": round(generate_s, 1), "steps": steps}
    train_rows = steps[0]["rows"]["train"]
    per_epoch = train_rows // (args.batch_size * 2)
    max_steps = max(2, min(per_epoch, args.max_steps) if args.max_steps else per_epoch)
    train = {**base, "train": {"workers": 2, "batch_size": args.batch_size, "max_steps": max_steps,
                               "warmup_steps": 1, "eval_every": max_steps, "checkpoint_every": max_steps,
                               "in_memory_rows": args.train_in_memory_rows}}
    steps.append(measure("train_epoch", data, out, train))
    steps[-1]["epoch_fraction"] = round(max_steps / per_epoch, 3) if per_epoch else None
    if not args.keep:
        shutil.rmtree(data), shutil.rmtree(out)
    return {"rows": rows, "partitions": partitions, "parquet_mb": round(disk_mb, 1), "generate_s": round(generate_s, 1),
            "steps": steps}


def main() -> None:
    if "--engine" in sys.argv and sys.argv[sys.argv.index("--engine") + 1] == "spark":
        from scale_spark import main as spark_main  # a sibling script (benchmarks/ is on the path)

        return spark_main(sys.argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default="1000000,4000000,16000000", help="comma-separated row counts")
    parser.add_argument("--rows-per-partition", type=int, default=250_000)
    parser.add_argument("--batch-size", type=int, default=2048, help="per rank (2 ranks)")
    parser.add_argument("--max-steps", type=int, default=0, help="cap on the training steps (0: one full epoch)")
    parser.add_argument("--train-in-memory-rows", type=int, default=500_000,
                        help="train.in_memory_rows: above it each rank reads only its shard (a huge value: the "
                             "whole-split path, the 'before' of the sharded reading)")
    parser.add_argument("--steps", default="validation,snapshot,train_epoch",
                        help="which steps to run (train_epoch needs validation's snapshot)")
    parser.add_argument("--out", default="", help="work directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the data and outputs")
    args = parser.parse_args()
    sizes = [int(r) for r in args.rows.split(",") if r]
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ctpipe-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for rows in sizes:
        result = run_size(rows, args, work)
        print(json.dumps(result), flush=True)
        results.append(result)
    linearity = {}
    if len(results) >= 2:
        a, b = results[-2], results[-1]
        for sa, sb in zip(a["steps"], b["steps"], strict=True):
            linearity[sa["step"]] = round((sb["cpu_s"] / sa["cpu_s"]) / (b["rows"] / a["rows"]), 3)
    if not args.out and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({
        "sizes": [{"rows": r["rows"], **{s["step"]: {k: s[k] for k in ("seconds", "cpu_s", "peak_rss_mb", "peak_tree_rss_mb")}
                                         for s in r["steps"]}} for r in results],
        "linearity": linearity, "cpus": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
