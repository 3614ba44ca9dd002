"""The reference statistics of a train split with the run's task's own drift columns and histograms.

The snapshot writer records the statistics of the schema's columns; a task may add derived per-row
columns (``Task.drift_columns``, e.g. a text's length) that the watcher judges like numeric columns, and
per-row counts over fixed bins (``Task.drift_histograms``, e.g. byte values) that it judges summed.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pandas as pd

from ctpipe.components.lib.data.reference_stats import (
    add_histograms,
    reference_stats_of,
    table_stats,
    write_reference_stats,
)
from ctpipe.components.lib.data.snapshot import Schema, Snapshot
from ctpipe.components.lib.data.stream_stats import TableStats


def task_table_stats(train: pd.DataFrame, schema: Schema, task: Any, *, first_row: int = 0) -> TableStats:
    """The statistics of ``train``'s columns and of the task's drift columns derived from its rows (``first_row``:
    the position of its first row in the train split, for the sample's priorities)."""
    derived = task.profile.drift_columns(train, schema)
    if not len(derived.columns):
        return table_stats(train, schema, first_row=first_row)
    extended = dataclasses.replace(schema, numeric=[*schema.numeric, *derived.columns])
    return table_stats(pd.concat([train, derived], axis=1), extended, first_row=first_row)


def task_reference_stats(train: pd.DataFrame, schema: Schema, task: Any) -> dict[str, Any]:
    """The train split's reference statistics, with the task's drift columns (``Task.drift_columns``)
    judged like numeric columns by the watcher, and its summed ``Task.drift_histograms``."""
    return reference_stats_of(task_table_stats(train, schema, task),
                              add_histograms({}, task.profile.drift_histograms(train, schema)))


def add_task_drift_stats(snapshot: Snapshot, task: Any) -> None:
    """Rewrite the snapshot's reference_stats.json (the writer's, of its train rows) with the task's drift
    columns, computed over the train split a record batch at a time; nothing to do when it has none."""
    stats, histograms, seen = None, {}, 0
    for frame in snapshot.batches("train"):
        first = frame.iloc[:1]
        if stats is None and not len(task.profile.drift_columns(first, snapshot.schema).columns) and not (
                task.profile.drift_histograms(first, snapshot.schema)):
            return
        part = task_table_stats(frame, snapshot.schema, task, first_row=seen)
        seen += len(frame)
        stats = part if stats is None else stats.merge(part)
        add_histograms(histograms, task.profile.drift_histograms(frame, snapshot.schema))
    if stats is not None:
        write_reference_stats(snapshot.root / "reference_stats.json", reference_stats_of(stats, histograms))
