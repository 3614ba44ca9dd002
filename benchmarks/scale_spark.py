"""Scale benchmark of the Spark engine: validation on Spark at growing sizes, against the local engine.

    python benchmarks/scale.py --engine spark [--rows 4000000,16000000,64000000] [--compare-at 16000000]
                               [--rows-per-partition 250000] [--master local[2]] [--out DIR] [--keep]
                               [--growth-rows-per-partition 50000] [--skip-growth]

For each row count: demo-schema partitions (``scale.write_rows``), then ``validate_data`` with
``validation.engine=spark`` in a fresh interpreter (``scale.measure``: wall and CPU seconds of the whole process
tree, the JVM and Spark's Python workers included, and the peak resident memory of each role: ``driver`` the
step's Python process, ``jvm`` Spark's JVM (driver and executors in one process in local mode),
``python_worker`` the largest Spark Python worker). At ``--compare-at`` rows the local engine validates the same
data too: the time ratio, and the parity of the two (verdict, failing checks, the split of every key, means
and stds, quantiles' rank error). Last, the bytes the statistics read when one partition is added to 64 with
their sketches stored. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scale import measure, write_rows  # noqa: I001  (benchmarks/ is on the path: a sibling script)

KEY = "customer_id"


def _keys(snapshot: Path, split: str) -> np.ndarray:
    return np.sort(pd.read_parquet(snapshot / f"{split}.parquet", columns=[KEY])[KEY].to_numpy())


def parity(local: Path, spark: Path) -> dict:
    """How the Spark engine's snapshot and verdict compare with the local engine's on the same data."""
    a, b = (json.loads((s / "validation.json").read_text()) for s in (local, spark))
    out = {"same_verdict": a["passed"] == b["passed"], "same_failing_checks": a["errors"] == b["errors"],
           "same_findings": [f["message"] for f in a["findings"]] == [f["message"] for f in b["findings"]],
           "same_rows": a["rows"] == b["rows"], "same_fingerprint": a["fingerprint"] == b["fingerprint"],
           "same_split_for_every_key": all(np.array_equal(_keys(local, s), _keys(spark, s)) for s in ("train", "val", "test"))}
    ra, rb = (json.loads((s / "reference_stats.json").read_text()) for s in (local, spark))
    rel, rank = 0.0, 0.0
    train = pd.read_parquet(local / "train.parquet", columns=list(ra["numeric"]))
    for col, stats in ra["numeric"].items():
        other = rb["numeric"][col]
        for name in ("mean", "std"):
            rel = max(rel, abs(other[name] - stats[name]) / max(abs(stats[name]), 1e-300))
        ordered = np.sort(pd.to_numeric(train[col], errors="coerce").dropna().to_numpy())
        qs = np.linspace(0, 1, len(other["quantiles"]))
        low = np.searchsorted(ordered, other["quantiles"], side="left") / len(ordered)
        high = np.searchsorted(ordered, other["quantiles"], side="right") / len(ordered)
        rank = max(rank, float(np.max(np.maximum(0, np.maximum(low - qs, qs - high)))))
    out.update(max_relative_difference_mean_std=rel, max_quantile_rank_error=rank,
               same_categorical=ra["categorical"] == rb["categorical"])
    return out


def bytes_read_adding_a_partition(work: Path, master: str, partitions: int = 64, rows_each: int = 50_000) -> dict:
    """The bytes the statistics read when one partition is added to ``partitions`` whose sketches are stored."""
    from ctpipe.components.lib.data.files import list_data_files
    from ctpipe.components.lib.data.snapshot import infer_schema
    from ctpipe.components.lib.data.splits import SplitSettings
    from ctpipe.components.lib.sketches.partition_sketches import train_sketch
    from ctpipe.components.lib.spark.session import spark_session
    from ctpipe.components.lib.spark.snapshot import spark_sketches

    data, store = work / "grow", str(work / "grow-sketches")
    write_rows(data, partitions * rows_each, rows_each)
    first = next(data.glob("date=*/part-0.parquet"))
    schema = infer_schema(pd.read_parquet(first), label="label", key=KEY, features=[], categorical=[])
    settings = SplitSettings(key=KEY, salt="ctpipe", val_fraction=0.1, test_fraction=0.1)
    with spark_session(master) as spark:
        compute = spark_sketches(spark, str(data), "auto", schema, settings)
        files = list_data_files(str(data))
        t = time.perf_counter()
        before = train_sketch(str(data), files, "auto", schema, settings, store_uri=store, compute=compute)
        all_s = time.perf_counter() - t
        write_rows(data, (partitions + 1) * rows_each, rows_each)  # rewrites the same 64 days, adds day 65
        files = list_data_files(str(data))
        t = time.perf_counter()
        after = train_sketch(str(data), files, "auto", schema, settings, store_uri=store, compute=compute)
        one_s = time.perf_counter() - t
    newest = sorted({f.path.split("/")[0] for f in files})[-1]
    return {"partitions_before": partitions, "first_pass_bytes_read": before.bytes_read,
            "first_pass_seconds": round(all_s, 1), "bytes_read": after.bytes_read,
            "new_partition_bytes": sum(f.size for f in files if f.path.startswith(newest)),
            "total_bytes": sum(f.size for f in files), "partitions_read": after.computed,
            "partitions_reused": len(after.reused), "seconds": round(one_s, 1)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", choices=["spark"], default="spark")
    parser.add_argument("--rows", default="4000000,16000000,64000000")
    parser.add_argument("--compare-at", type=int, default=16_000_000, help="rows at which the local engine runs too")
    parser.add_argument("--rows-per-partition", type=int, default=250_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--skip-growth", action="store_true", help="skip the one-partition-added measurement")
    parser.add_argument("--growth-rows-per-partition", type=int, default=50_000,
                        help="rows of each of the 64 (+1) partitions of the one-partition-added measurement")
    parser.add_argument("--out", default="")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="ctpipe-scale-spark-"))
    work.mkdir(parents=True, exist_ok=True)
    sizes, compared = [], {}
    for rows in [int(r) for r in args.rows.split(",") if r]:
        data, out = work / f"data-{rows}", work / f"spark-{rows}"
        partitions = write_rows(data, rows, args.rows_per_partition)
        spark_cfg = {"data": {"key": KEY}, "validation": {"engine": "spark", "spark_master": args.master,
                                                           "sketch_store": str(work / f"sketches-{rows}")}}
        step = measure("validation", data, out, spark_cfg)
        size = {"rows": rows, "partitions": partitions, "seconds": step["seconds"], "cpu_s": step["cpu_s"],
                "cpu_s_per_million_rows": round(step["cpu_s"] / (rows / 1e6), 2),
                "peak_rss_mb": step["peak_rss_mb_by_role"], "phases_s": step.get("phases_s"), "load_1m": step["load_1m"]}
        if rows == args.compare_at:
            local = measure("validation", data, work / f"local-{rows}", {"data": {"key": KEY}})
            compared = {"rows": rows, "local_seconds": local["seconds"], "local_cpu_s": local["cpu_s"],
                        "local_peak_rss_mb": local["peak_rss_mb"],
                        "time_ratio_spark_to_local": round(step["seconds"] / local["seconds"], 2),
                        "cpu_ratio_spark_to_local": round(step["cpu_s"] / local["cpu_s"], 2),
                        "parity": parity(work / f"local-{rows}" / "snapshot", out / "snapshot")}
            if not args.keep:
                shutil.rmtree(work / f"local-{rows}", ignore_errors=True)
        print(json.dumps(size), flush=True)
        sizes.append(size)
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True), shutil.rmtree(out, ignore_errors=True)
    growth = {} if args.skip_growth else bytes_read_adding_a_partition(work, args.master,
                                                                       rows_each=args.growth_rows_per_partition)
    if not args.out and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"engine": "spark", "master": args.master, "sizes": sizes, "against_local": compared,
                      "statistics_when_one_partition_is_added": growth}))
