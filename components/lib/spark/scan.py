"""Pass 1 in Spark: every file scanned in a Spark task by the local engine's code, joined in Spark and the driver.

Each task runs ``scan_parts.ScanPart`` over one group of files' record batches (``file_groups``) (its global row position and its rows
before it in its partition come from the row counts, so priorities, sample and error messages are the local
engine's) and returns (a) one record with its part (figures, sample candidates: bounded) and (b) one record per
row: split, content hash, key and label hashes, row in its partition. The driver merges the parts in file order
(``ScanPart.merge``: the local one-pass figures, tested in ``tests/components/lib/data/test_scan_parts.py``);
the per-row records, which no process holds, are joined in Spark: cross-split duplicates and keys repeated
with different labels. Parts travel pickled between this application's own processes; nothing is stored so.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches
from ctpipe.components.lib.data.files import DataFile, partition_of
from ctpipe.components.lib.data.scan import Scan, sample_budget
from ctpipe.components.lib.data.scan_parts import ScanPart, key_conflict_error, rows_where
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.lib.spark.files import FileFacts

# Per row ~40 bytes (persisted on the executors' disks during the pass): its group stands for its partition.
ROWS = "file long, part_row boolean, split byte, content long, key long, label long, row long, pos long, part binary"


GROUP_ROWS = 1_000_000


def file_groups(facts: FileFacts, max_rows: int = GROUP_ROWS) -> pd.DataFrame:
    """One task's unit per row: consecutive files of one partition holding at most ``max_rows`` rows (at least one
    file; a folder of 50,000 small files is a few tasks, not 50,000), with its global first row, the rows of its
    partition before it and its files as JSON ([path, size, sha256])."""
    groups, position, in_part = [], 0, {}
    for f, n in zip(facts.files, facts.rows, strict=True):
        part = partition_of(f.path)
        last = groups[-1] if groups else None
        if last is None or last["partition"] != part or last["rows"] + n > max_rows:
            last = {"group": len(groups), "partition": part, "files": [], "rows": 0, "position": position,
                    "in_part": in_part.get(part, 0)}
            groups.append(last)
        last["files"].append([f.path, f.size, f.sha256])
        last["rows"] += n
        position += n
        in_part[part] = in_part.get(part, 0) + n
    return pd.DataFrame([{**g, "files": json.dumps(g["files"])} for g in groups],
                        columns=["group", "partition", "files", "rows", "position", "in_part"])


def group_files(rec: dict[str, Any]) -> list[DataFile]:
    return [DataFile(path, int(size), sha) for path, size, sha in json.loads(rec["files"])]


def _scan_group(rec: dict[str, Any], ctx: dict[str, Any]) -> Iterator[pd.DataFrame]:
    """One group's per-row records, then its part (or the user error it raised)."""
    files = group_files(rec)
    part_name = rec["partition"]
    part = ScanPart(budget=ctx["budget"], keep_rows=False, position=int(rec["position"]),
                    in_part={part_name: int(rec["in_part"])}, **ctx["part"])
    try:
        for batch in iter_batches(ctx["data_uri"], files, ctx["fmt"]):
            start = part.position
            rows = part.add(batch)
            n = len(rows["split"])
            keyed = "key" in rows
            yield pd.DataFrame({
                "file": np.full(n, rec["group"], dtype=np.int64), "part_row": np.zeros(n, dtype=bool),
                "split": rows["split"], "content": rows["content"].view(np.int64),
                "key": rows["key"].view(np.int64) if keyed else pd.array([None] * n, dtype="Int64"),
                "label": rows["label"].view(np.int64) if keyed else pd.array([None] * n, dtype="Int64"),
                "row": rows["row"],
                "pos": np.arange(start, start + n, dtype=np.int64), "part": [None] * n})
        blob = pickle.dumps(("part", part))
    except UserError as err:  # the same named error the local engine raises, re-raised by the driver
        blob = pickle.dumps(("error", type(err).__name__, str(err)))
    yield pd.DataFrame({"file": [rec["group"]], "part_row": [True], "split": [np.int8(-1)], "content": [0],
                        "key": pd.array([None], dtype="Int64"), "label": pd.array([None], dtype="Int64"),
                        "row": [0], "pos": [0], "part": [blob]})


def _scan_task(ctx: dict[str, Any]):
    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            for rec in frame.to_dict("records"):
                yield from _scan_group(rec, ctx)
    return run


def _raise(kind: str, message: str) -> None:
    from ctpipe.components.lib import errors

    raise getattr(errors, kind, DataValidationError)(message)


def _key_conflicts(rows, key: str, label: str, partition_of_group: list[str]) -> None:
    """Raise the local engine's error when a key carries two labels anywhere in the data (joined in Spark)."""
    from pyspark.sql import functions as F

    keyed = rows.select("key", "label", "pos", "file", "row")
    per_key = keyed.groupBy("key").agg(F.countDistinct("label").alias("labels"), F.min("pos").alias("first"),
                                       F.count("*").alias("rows"))
    bad = per_key.filter("labels > 1").cache()
    conflicting = bad.count()
    if conflicting:
        places = []
        for first in bad.orderBy("first").limit(3).collect():
            found = keyed.filter(F.col("key") == first["key"]).orderBy("pos").limit(8).collect()
            places.append(rows_where([(partition_of_group[r["file"]], int(r["row"])) for r in found],
                                     int(first["rows"])))
        bad.unpersist()
        raise key_conflict_error(key, label, conflicting, places)
    bad.unpersist()


def _duplicates(rows) -> tuple[int, int]:
    """(val/test rows whose content repeats a train row, or a test row repeating a val row; val/test rows)."""
    from pyspark.sql import functions as F

    train = rows.filter("split = 0").select("content").distinct().withColumn("in_train", F.lit(True))
    val = rows.filter("split = 1").select("content").distinct().withColumn("in_val", F.lit(True))
    held = rows.filter("split != 0").select("split", "content")
    joined = held.join(train, "content", "left").join(val, "content", "left")
    counts = joined.agg(F.count("*").alias("held"), F.sum(F.when(F.col("in_train") | (F.col("split") == 2) & F.col(
        "in_val"), 1).otherwise(0)).alias("dup")).collect()[0]
    return int(counts["dup"] or 0), int(counts["held"] or 0)


def spark_scan(spark, data_uri: str, facts: FileFacts, fmt: str, *, label: str | None, key: str | None,
               features: list[str], settings: SplitSettings, sample_rows: int, seed: int = 0,
               stratify_by_label: bool = True, partitions: int = 64) -> tuple[Scan, dict[int, int]]:
    """Pass 1 over every group of files in Spark tasks: the local ``scan``'s result (its per-row arrays left in
    Spark), and each group's train rows (pass 2 needs them for the training window)."""
    from pyspark import StorageLevel

    names = sorted({partition_of(f.path) for f in facts.files})
    ctx = {"data_uri": data_uri, "fmt": fmt, "budget": sample_budget(sample_rows, len(names)),
           "part": {"label": label, "key": key, "features": features, "settings": settings, "seed": seed,
                    "stratify_by_label": stratify_by_label}}
    groups = file_groups(facts)
    table = spark.createDataFrame(groups).repartition(max(1, min(partitions, len(groups))))
    out = table.mapInPandas(_scan_task(ctx), ROWS).persist(StorageLevel.DISK_ONLY)
    try:
        found = sorted((r["file"], r["part"]) for r in out.filter("part_row").select("file", "part").collect())
        merged, file_train = None, {}
        for index, blob in found:
            result = pickle.loads(blob)
            if result[0] == "error":
                _raise(result[1], result[2])
            part = result[1]
            file_train[index] = int(sum(c[0] for c in part.split_counts.values()))
            merged = part if merged is None else merged.merge(part)
        rows = out.filter("NOT part_row")
        if key is not None and label is not None:
            _key_conflicts(rows, key, label, list(groups["partition"]))
        scanned = merged.to_scan(names)
        scanned.duplicates = _duplicates(rows)
        return scanned, file_train
    finally:
        out.unpersist()
