"""Where validation computes: the local engine (this process) or the Spark engine (``spark_engine.py``).

Both give ``validate.py`` the same things: the files with their fingerprint, the row count, pass 1's ``Scan``
(exact figures and the stratified sample the row checks judge) and the written snapshot. The checks, the
suite and the reports run on the driver in both, on the same sample, so their verdicts and messages are
the same. ``validation.engine``: ``local``, ``spark``, or ``auto`` (Spark above ``validation.spark_min_rows``
rows, counted from the Parquet footers).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data import scan as stream
from ctpipe.components.lib.data.batches import count_rows
from ctpipe.components.lib.data.files import DataFile
from ctpipe.components.lib.data.snapshot import SPLIT_COLUMN, Snapshot, list_data_files, write_snapshot
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.work_progress import WorkMeter
from ctpipe.components.steps.validate_data.statistics import keep_in_memory, keep_streamed, train_statistics

MAX_IN_MEMORY_FILES = 1_000


def _partition(rel_path: str) -> str:
    parts = rel_path.split("/")[:-1]
    return "/".join(parts) if parts else rel_path


def meter(doing: str, rows: int, files: list, config: Config) -> WorkMeter:
    """The progress line of a streaming pass over ``rows`` rows of ``files``."""
    return WorkMeter("validate_data", doing, rows, "rows", parts_total=len({_partition(f.path) for f in files}),
                     every_seconds=config.validation.progress_seconds)


class LocalEngine:
    """Everything in this process: the data streamed above ``validation.in_memory_rows``, else read whole."""

    name = "local"

    def list_files(self, data_uri: str, config: Config) -> list[DataFile]:
        return list_data_files(data_uri)

    def count_rows(self, data_uri: str, files: list[DataFile], config: Config) -> int | None:
        return count_rows(data_uri, files, config.data.format)

    def streams(self, total: int | None, config: Config, files: int = 0) -> bool:
        """Above ``validation.in_memory_rows`` rows, or ``MAX_IN_MEMORY_FILES`` Parquet files (reading many small files
        one frame each takes ~15 ms a file; the stream reads them into shared batches)."""
        return total is not None and (total > config.validation.in_memory_rows or files > MAX_IN_MEMORY_FILES)

    def scan(self, data_uri: str, files: list[DataFile], config: Config, *, label: str | None,
             stratify_by_label: bool, total: int) -> stream.Scan:
        progress = meter("scanning", total, files, config)
        scanned = stream.scan(data_uri, files, config.data.format, label=label, key=config.data.key,
                              features=list(config.data.features), settings=SplitSettings.from_config(config.data),
                              sample_rows=config.validation.sample_rows, stratify_by_label=stratify_by_label,
                              on_batch=progress.advance)
        progress.finish()
        return scanned

    def write_snapshot(self, snapshot_dir: str, inputs: Any, data_uri: str, fingerprint: str, task: Any,
                       config: Config) -> Snapshot:
        keep = keep_streamed(inputs.scan, inputs.window) if inputs.scan is not None else keep_in_memory(
            inputs.data, inputs.window)
        stats = train_statistics(data_uri, inputs.files, inputs.format, inputs.schema, config, keep).sketch
        if inputs.scan is None:
            return write_snapshot(snapshot_dir, inputs.data.drop(columns=[SPLIT_COLUMN]), inputs.data[SPLIT_COLUMN],
                                  inputs.schema, data_uri=data_uri, files=inputs.files, fingerprint=fingerprint,
                                  window=inputs.window, task=task, stats=stats)
        progress = meter("writing the snapshot", sum(inputs.scan.rows.values()), inputs.files, config)
        snapshot = stream.write_snapshot_stream(snapshot_dir, data_uri, inputs.files, inputs.format, inputs.scan,
                                                inputs.schema, fingerprint=fingerprint, window=inputs.window,
                                                task=task, on_batch=progress.advance, stats=stats)
        progress.finish()
        return snapshot


def check_width(data_uri: str, files: list[DataFile], config: Config) -> None:
    """Stop data wider than ``validation.max_columns`` (its first file's header) before any row is read: every
    column is profiled, expected and leakage-checked, so 10,000 columns would stall the step, not fail it."""
    from ctpipe.components.lib.data.batches import _full_path, _kind
    from ctpipe.components.lib.errors import DataValidationError

    limit = config.validation.max_columns
    if not files or config.data.features:
        return
    fs, full = _full_path(data_uri, files[0])
    try:
        with fs.open(full, "rb") as handle:
            if _kind(files[0], config.data.format) == "parquet":
                import pyarrow.parquet as pq

                width = len(pq.read_schema(handle).names)
            else:
                width = len(handle.readline().split(b","))
    except Exception:  # a damaged file is named by the read that follows
        return
    if width > limit:
        raise DataValidationError(
            f"the data has {width} columns (file '{files[0].path}'), more than validation.max_columns={limit}: "
            "validation profiles, expects and leakage-checks every feature column. Name the model's columns with "
            "data.features (only they are judged), or raise validation.max_columns (the local engine holds the "
            "stratified sample, about validation.sample_rows x columns x 8 bytes)")


def chosen_engine(data_uri: str, config: Config) -> str:
    """``validation.engine``, with ``auto`` decided by the row count in the Parquet footers."""
    engine = config.validation.engine
    if engine != "auto":
        return engine
    total = count_rows(data_uri, list_data_files(data_uri, with_hashes=False), config.data.format)
    return "spark" if total is not None and total > config.validation.spark_min_rows else "local"


@contextmanager
def open_engine(data_uri: str, config: Config) -> Iterator[Any]:
    """The engine ``validation.engine`` names (a Spark engine holds its session until the step is done)."""
    if chosen_engine(data_uri, config) == "local":
        yield LocalEngine()
        return
    from ctpipe.components.steps.validate_data.spark_engine import SparkEngine

    with SparkEngine.open(config) as engine:
        print(f"validate_data: computing on Spark ({engine.master})", file=sys.stderr)
        yield engine
