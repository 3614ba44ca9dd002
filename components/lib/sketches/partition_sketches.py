"""The train split's sketches, one partition at a time: only partitions without a stored sketch are read.

A partition's train sketch (``TableSketch`` of its train rows) is keyed by everything that decides it: the
partition's files (names, sizes, SHA-256: its content fingerprint), the split settings, the columns and their
kinds, which of its train rows the training window keeps, and the sketch format. A new daily partition is
read and sketched; the others come from the store (``sketch_store.py``) and are merged, partition by
partition in path order, into the split's sketch. Both engines use this: the local one computes missing
sketches in its own process, the Spark engine in Spark tasks (``compute``), with the same function.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches
from ctpipe.components.lib.data.concat import conform
from ctpipe.components.lib.data.files import DataFile, partition_of
from ctpipe.components.lib.data.splits import SplitSettings, split_keys
from ctpipe.components.lib.sketches.sketch_store import SketchStore
from ctpipe.components.lib.sketches.table_sketch import FORMAT, TableSketch, merge_all, partition_priority

# Which train rows of a partition the window keeps: None all, 0 none, n > 0 its last n (data.max_train_rows).
Keep = int | None


@dataclass(frozen=True)
class SketchJob:
    """One partition to sketch: its files, which train rows to keep and its store key."""

    partition: str
    files: tuple[DataFile, ...]
    keep: Keep
    key: str


@dataclass
class SketchPass:
    """The merged train sketch and what it cost: partitions read (and their bytes) or reused from the store."""

    sketch: TableSketch
    computed: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    bytes_read: int = 0


def _schema_part(schema: Any) -> dict[str, Any]:
    return {"key": schema.key, "label": schema.label, "numeric": list(schema.numeric),
            "categorical": list(schema.categorical)}


def scope_of(data_uri: str, settings: SplitSettings, schema: Any) -> str:
    """The store scope of a data root under these split settings and columns."""
    doc = {"data": data_uri.rstrip("/"), "split": settings.to_dict(), "schema": _schema_part(schema), "format": FORMAT}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:24]


def partition_key(partition: str, files: list[DataFile], keep: Keep) -> str:
    """A partition's sketch key within its scope: its content fingerprint and the window's cut."""
    h = hashlib.sha256(f"{partition}\0{keep}\n".encode())
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\0{f.size}\0{f.sha256}\n".encode())
    return h.hexdigest()


def _train_rows(data_uri: str, files: list[DataFile], fmt: str, schema: Any, settings: SplitSettings):
    """Each batch's train rows of a partition's files, in file order."""
    seen = 0
    for batch in iter_batches(data_uri, files, fmt):
        keys = split_keys(batch, schema, first_row=seen)
        seen += len(batch)
        yield batch[(settings.assign(keys) == "train").to_numpy()]


def _widened(frame: pd.DataFrame, numeric: list[str]) -> pd.DataFrame:
    """float32 columns through their shortest text (``concat.conform``): 0.1, not 0.10000000149, as in the snapshot."""
    narrow = [c for c in numeric if c in frame.columns and pd.api.types.is_float_dtype(frame[c])
              and frame[c].dtype.itemsize < 8]
    return frame.assign(**{c: conform(frame[c], np.dtype("float64")) for c in narrow}) if narrow else frame


def sketch_partition(data_uri: str, job: SketchJob, fmt: str, schema: Any, settings: SplitSettings) -> TableSketch:
    """The train sketch of one partition (reading only its files)."""
    columns = list(schema.numeric) + list(schema.categorical)
    sketch = TableSketch.for_columns(list(schema.numeric), list(schema.categorical))
    if job.keep == 0:
        return sketch
    skip = 0
    if job.keep is not None:  # the window keeps the last ``keep`` train rows: count them first
        total = sum(len(t) for t in _train_rows(data_uri, list(job.files), fmt, schema, settings))
        skip = max(total - job.keep, 0)
    position = 0
    for train in _train_rows(data_uri, list(job.files), fmt, schema, settings):
        if skip:
            dropped = min(skip, len(train))
            train, skip = train.iloc[dropped:], skip - dropped
        frame = _widened(train.reindex(columns=columns), list(schema.numeric))
        sketch.add(frame, partition_priority(frame, job.partition, position))
        position += len(frame)
    return sketch


def sketch_jobs(files: list[DataFile], keep: dict[str, Keep] | None = None) -> list[SketchJob]:
    """One job per partition, in path order (``keep``: per partition, default every train row)."""
    grouped: dict[str, list[DataFile]] = {}
    for f in files:
        grouped.setdefault(partition_of(f.path), []).append(f)
    jobs = []
    for part in sorted(grouped):
        k = (keep or {}).get(part)
        jobs.append(SketchJob(part, tuple(grouped[part]), k, partition_key(part, grouped[part], k)))
    return jobs


Compute = Callable[[list[SketchJob]], dict[str, TableSketch]]


def train_sketch(data_uri: str, files: list[DataFile], fmt: str, schema: Any, settings: SplitSettings, *,
                 store_uri: str = "", keep: dict[str, Keep] | None = None, compute: Compute | None = None) -> SketchPass:
    """The train split's merged sketch: stored partitions reused, the others computed (by ``compute``, default
    here one at a time) and stored; then the store is pruned to this data's partitions."""
    store = SketchStore(store_uri, scope_of(data_uri, settings, schema))
    jobs = sketch_jobs(files, keep)
    found: dict[str, TableSketch] = {}
    missing = []
    for job in jobs:
        stored = store.get(job.key)
        if stored is not None and list(stored.numeric) == list(schema.numeric) \
                and list(stored.categorical) == list(schema.categorical):
            found[job.partition] = stored
        else:
            missing.append(job)
    if compute is None:
        computed = {job.partition: sketch_partition(data_uri, job, fmt, schema, settings) for job in missing}
    else:
        computed = compute(missing) if missing else {}
    for job in missing:
        store.put(job.key, computed[job.partition])
    store.prune({job.key for job in jobs})
    merged = merge_all([found.get(j.partition) or computed[j.partition] for j in jobs],
                       list(schema.numeric), list(schema.categorical))
    return SketchPass(merged, [j.partition for j in missing], [j.partition for j in jobs if j.partition in found],
                      sum(f.size for j in missing if j.keep != 0 for f in j.files))
