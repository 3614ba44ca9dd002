"""Pass 2 in Spark: each task writes its file's rows into the snapshot's split folders; sketches in Spark tasks.

The snapshot's ``train.parquet`` / ``val.parquet`` / ``test.parquet`` are folders: one ``part-NNNNNN.parquet``
per group of data files (``scan.file_groups``) (row groups of at most 65,536 rows, the columns and dtypes of the sample, as the local engine
writes its one file), which the training ranks read by row group across the parts
(``split_files.SplitGroups``). A task writes a part under a private name and renames it, so a retried task
leaves one whole part. The driver never holds a row: it writes the schema, the task's state, the reference
statistics and the fingerprint (``snapshot.finish_snapshot``).
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches
from ctpipe.components.lib.data.concat import conform
from ctpipe.components.lib.data.scan import Scan, window_quota
from ctpipe.components.lib.data.snapshot import Schema, Snapshot, finish_snapshot
from ctpipe.components.lib.data.split_files import SplitWriter
from ctpipe.components.lib.data.splits import SPLIT_COLUMN, SPLITS, SplitSettings, split_keys
from ctpipe.components.lib.data.window import TrainWindow
from ctpipe.components.lib.sketches.partition_sketches import Compute, SketchJob, sketch_partition
from ctpipe.components.lib.sketches.table_sketch import TableSketch
from ctpipe.components.lib.spark.files import FileFacts
from ctpipe.components.lib.spark.scan import file_groups, group_files


def _write_group(rec: dict[str, Any], ctx: dict[str, Any]) -> dict[str, int]:
    """Write one group's rows into the split folders; rows written per split and train rows left out."""
    files = group_files(rec)
    part = rec["partition"]
    like: pd.DataFrame = ctx["like"]
    root = Path(ctx["root"])
    quota = ctx["quota"]
    writers, tmp = {}, {}
    train_seen, excluded, in_part = int(rec["train_before"]), 0, int(rec["in_part"])
    for batch in iter_batches(ctx["data_uri"], files, ctx["fmt"]):
        batch = batch.reindex(columns=list(like.columns))
        for col, dtype in like.dtypes.items():
            if batch[col].dtype != dtype:
                batch[col] = conform(batch[col], dtype).astype(dtype)
        split = ctx["settings"].assign(split_keys(batch, ctx["schema"], first_row=in_part)).to_numpy().astype(object)
        in_part += len(batch)
        if quota is not None:
            train = split == "train"
            index = train_seen + np.cumsum(train) - 1  # position among the partition's train rows
            train_seen += int(train.sum())
            drop = train & (index < ctx["train_total"][part] - quota[part])
            excluded += int(drop.sum())
            split = np.where(drop, "outside_window", split)
        for name in SPLITS:
            mask = split == name
            if mask.any():
                if name not in writers:
                    tmp[name] = root / f"{name}.parquet" / f".part-{rec['group']:06d}-{uuid.uuid4().hex}.parquet"
                    writers[name] = SplitWriter(tmp[name])
                writers[name].write(batch.loc[mask, [c for c in batch.columns if c != SPLIT_COLUMN]]
                                    .reset_index(drop=True))
    out = {"excluded": excluded}
    for name, writer in writers.items():
        writer.close(like)
        os.replace(tmp[name], root / f"{name}.parquet" / f"part-{rec['group']:06d}.parquet")
        out[name] = writer.rows
    return out


def spark_write_snapshot(spark, out_dir: str, data_uri: str, facts: FileFacts, fmt: str, scanned: Scan,
                         file_train: dict[int, int], schema: Schema, settings: SplitSettings, *, fingerprint: str,
                         window: TrainWindow, task: Any, stats: Any, partitions: int = 64) -> Snapshot:
    """Pass 2 in Spark tasks, then the snapshot's records on the driver."""
    root = Path(out_dir)
    for name in SPLITS:
        (root / f"{name}.parquet").mkdir(parents=True, exist_ok=True)
    table = file_groups(facts)
    # Train rows of each group's partition in the groups before it (the window keeps a partition's last train rows).
    before, seen = [], {}
    for index, part in enumerate(table["partition"]):
        before.append(seen.get(part, 0))
        seen[part] = seen.get(part, 0) + file_train.get(index, 0)
    table["train_before"] = before
    names = list(scanned.rows)
    quota = None if window.is_all else window_quota(scanned, names, window)
    ctx = {"data_uri": data_uri, "fmt": fmt, "root": str(root), "like": scanned.sample.iloc[:0],
           "settings": settings,
           "schema": Schema(label=schema.label, key=schema.key, numeric=[], categorical=[], classes=[]),
           "quota": quota, "train_total": dict(seen)}
    records = table.to_dict("records")
    slices = max(1, min(partitions, len(records)))
    results = spark.sparkContext.parallelize(records, slices).map(lambda rec: _write_group(rec, ctx)).collect()
    rows = {name: sum(r.get(name, 0) for r in results) for name in SPLITS}
    for name in SPLITS:
        if rows[name] == 0:  # an empty split is one empty part with the columns, as the local engine writes it
            SplitWriter(root / f"{name}.parquet" / "part-empty.parquet").close(ctx["like"])
    train_window = None
    if quota is not None:
        train_window = {**window.to_dict(), "excluded_train_rows": sum(r["excluded"] for r in results),
                        "partitions": sorted(p for p, n in quota.items() if n > 0)}
    return finish_snapshot(root, schema, task, stats, data_uri=data_uri, files=facts.files, fingerprint=fingerprint,
                           rows=rows, window=train_window)


def spark_sketches(spark, data_uri: str, fmt: str, schema: Schema, settings: SplitSettings, *,
                   partitions: int = 64) -> Compute:
    """The sketch pass's ``compute``: each missing partition's sketch in a Spark task (the local engine's code)."""
    def compute(jobs: list[SketchJob]) -> dict[str, TableSketch]:
        slices = max(1, min(partitions, len(jobs)))
        found = spark.sparkContext.parallelize(jobs, slices).map(
            lambda job: (job.partition, sketch_partition(data_uri, job, fmt, schema, settings).to_json())).collect()
        return {name: TableSketch.from_json(text) for name, text in found}
    return compute
