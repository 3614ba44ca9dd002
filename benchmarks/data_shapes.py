"""The shapes one pod choked on: a partition that is a folder of many small files, and a very wide table.

    python benchmarks/data_shapes.py [--files 50000] [--rows-per-file 10] [--columns 10000] [--engines local,spark]

Writes one partition of ``--files`` Parquet files of ``--rows-per-file`` rows (plus a small second partition),
then validates it with each engine in a fresh interpreter (``scale.measure``: wall and CPU seconds, peak RSS per
process role); then a table of ``--columns`` columns, which both engines must refuse by
``validation.max_columns`` before reading a row. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from scale import measure  # noqa: I001  (a sibling script: benchmarks/ is on the path)


def write_small_files(root: Path, files: int, rows: int) -> None:
    rng = np.random.default_rng(0)
    for day, count in ((1, files), (2, 10)):
        part = root / f"date=2026-01-0{day}"
        part.mkdir(parents=True)
        for i in range(count):
            start = day * 10**9 + i * rows
            pq.write_table(pa.table({"customer_id": np.arange(start, start + rows), "x": rng.normal(size=rows),
                                     "c": rng.choice(["a", "b", "c"], rows), "label": rng.choice(["y", "n"], rows)}),
                           part / f"part-{i:06d}.parquet")


def write_wide(root: Path, columns: int) -> None:
    part = root / "date=2026-01-01"
    part.mkdir(parents=True)
    values = {f"f{i}": np.arange(100.0) for i in range(columns)}
    pq.write_table(pa.table({"customer_id": np.arange(100), "label": ["y", "n"] * 50, **values}), part / "part-0.parquet")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--rows-per-file", type=int, default=10)
    parser.add_argument("--columns", type=int, default=10_000)
    parser.add_argument("--engines", default="local,spark")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctpipe-shapes-"))
    out = {"files": args.files, "rows_per_file": args.rows_per_file, "columns": args.columns, "small_files": {},
           "wide": {}}
    try:
        write_small_files(work / "small", args.files, args.rows_per_file)
        write_wide(work / "wide", args.columns)
        for engine in args.engines.split(","):
            cfg = {"data": {"key": "customer_id"}, "validation": {"engine": engine, "spark_master": "local[2]"}}
            step = measure("validation", work / "small", work / f"out-{engine}", cfg)
            out["small_files"][engine] = {k: step[k] for k in ("seconds", "cpu_s", "peak_rss_mb_by_role", "rows")}
            try:
                measure("validation", work / "wide", work / f"wide-{engine}", cfg)
                out["wide"][engine] = "finished"
            except SystemExit as stop:  # the step's user error: what it said
                said = str(stop)
                out["wide"][engine] = "stopped by validation.max_columns" if "validation.max_columns" in said else said[-300:]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
