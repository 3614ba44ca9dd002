"""The prediction log: every prediction the serving wrapper makes, for joining labels that arrive later.

Each row: ``request_id`` (one per request), ``row`` (its position in the request), ``key`` (the data's key column
when the request carries it, else null), ``model_name``, ``model_version``, ``served_at`` (UTC), then the
served columns as the model returned them (a classifier's ``predicted_class`` and its class probabilities, a
regressor's value). Rows are written as Parquet under ``URI/date=YYYY-MM-DD/`` (any fsspec URI), one file per
batch of at most ``batch_rows``, by a background thread: a request only appends to a bounded queue. Nothing
here may fail or block a request: a queue that is full (the store too slow) or a write that fails (the store
unreachable, the disk full) drops those rows and counts them (``stats()``), with a warning at most once a
minute. A file is written under a hidden name (``_tmp-...``; data readers skip ``_``/``.`` names) and then
moved into place, so a reader never sees half a file.

The serving process is told where to log by its environment (``ctpipe serve`` sets it from the
``serving`` config section; for ``mlflow models serve`` or a KServe predictor, set it yourself):
``CTPIPE_PREDICTION_LOG`` (the URI; unset: off), ``CTPIPE_MODEL_NAME``, ``CTPIPE_MODEL_VERSION``,
``CTPIPE_PREDICTION_KEY`` (the key column), ``CTPIPE_PREDICTION_LOG_BATCH_ROWS``,
``CTPIPE_PREDICTION_LOG_FLUSH_SECONDS``, ``CTPIPE_PREDICTION_LOG_MAX_PENDING_ROWS``.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pandas as pd

logger = logging.getLogger(__name__)

ENV_URI = "CTPIPE_PREDICTION_LOG"
ENV_MODEL_NAME = "CTPIPE_MODEL_NAME"
ENV_MODEL_VERSION = "CTPIPE_MODEL_VERSION"
ENV_KEY = "CTPIPE_PREDICTION_KEY"
ENV_BATCH_ROWS = "CTPIPE_PREDICTION_LOG_BATCH_ROWS"
ENV_FLUSH_SECONDS = "CTPIPE_PREDICTION_LOG_FLUSH_SECONDS"
ENV_MAX_PENDING = "CTPIPE_PREDICTION_LOG_MAX_PENDING_ROWS"
LOG_COLUMNS = ("request_id", "row", "key", "model_name", "model_version", "served_at")
WARN_EVERY_SECONDS = 60.0


def serving_environment(serving: Any, model_name: str, model_version: str) -> dict[str, str]:
    """The environment that turns the log on in a serving process, from a ``serving`` config section (empty: off)."""
    if not serving.prediction_log:
        return {}
    return {
        ENV_URI: serving.prediction_log, ENV_MODEL_NAME: model_name, ENV_MODEL_VERSION: str(model_version),
        ENV_BATCH_ROWS: str(serving.prediction_log_batch_rows),
        ENV_FLUSH_SECONDS: str(serving.prediction_log_flush_seconds),
        ENV_MAX_PENDING: str(serving.prediction_log_max_pending_rows),
    }  # fmt: skip


class PredictionLog:
    """Appends served rows to a bounded queue; a daemon thread writes them in batches (see the module doc)."""

    def __init__(
        self, uri: str, *, model_name: str | None, model_version: str | None, key_column: str | None = None,
        batch_rows: int = 5000, flush_seconds: float = 30.0, max_pending_rows: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:  # fmt: skip
        self.uri = uri.rstrip("/")
        self.model_name, self.model_version, self.key_column = model_name, model_version, key_column
        self.batch_rows, self.flush_seconds, self.max_pending_rows = batch_rows, flush_seconds, max_pending_rows
        self.clock = clock
        self._pending: list[tuple[str, float, Any, pd.DataFrame]] = []
        self._pending_rows = 0
        self._lock = threading.Condition()
        self._closed = False
        self._writing = False
        self._counts = {"logged_rows": 0, "written_files": 0, "dropped_rows": 0, "failed_writes": 0}
        self._last_error: str | None = None
        self._last_warning = 0.0
        self._thread = threading.Thread(target=self._run, name="ctpipe-prediction-log", daemon=True)
        self._thread.start()
        atexit.register(self.close, timeout=5.0)

    @classmethod
    def from_environment(cls, environ: dict[str, str] | None = None, *, key_column: str | None = None) -> PredictionLog | None:
        """The log the serving environment asks for (``CTPIPE_PREDICTION_LOG``), else None (off)."""
        env = os.environ if environ is None else environ
        uri = (env.get(ENV_URI) or "").strip()
        if not uri:
            return None
        return cls(
            uri, model_name=env.get(ENV_MODEL_NAME), model_version=env.get(ENV_MODEL_VERSION),
            key_column=env.get(ENV_KEY) or key_column, batch_rows=int(env.get(ENV_BATCH_ROWS) or 5000),
            flush_seconds=float(env.get(ENV_FLUSH_SECONDS) or 30.0),
            max_pending_rows=int(env.get(ENV_MAX_PENDING) or 100_000),
        )  # fmt: skip

    # --- the request's side: never raises, never waits for the store ---------------------------------------

    def log(self, inputs: pd.DataFrame, outputs: pd.DataFrame, request_id: str | None = None) -> None:
        """Queue one request's rows (dropped and counted when the queue is full or the rows cannot be read).

        Only references are queued here (the served frame, the key column's values): the rows are framed by
        the writer thread, so a request pays microseconds (``benchmarks/prediction_log.py``)."""
        try:
            n = len(outputs)
        except Exception:  # not a frame at all: nothing to count by
            n = 0
        try:
            key = None
            if self.key_column and self.key_column in inputs.columns:
                key = inputs[self.key_column].to_numpy(copy=True)
            entry = (request_id or uuid.uuid4().hex, self.clock(), key, outputs)
        except Exception as err:  # a request must never fail because of its log
            self._drop(n, f"could not read the rows: {type(err).__name__}: {err}")
            return
        with self._lock:
            if self._closed or self._pending_rows + n > self.max_pending_rows:
                full = f"the queue is full ({self._pending_rows} rows waiting, at most {self.max_pending_rows})"
                reason = "the log is closed" if self._closed else full
            else:
                self._pending.append(entry)
                self._pending_rows += n
                if self._pending_rows >= self.batch_rows:
                    self._lock.notify()
                return
        self._drop(n, reason)

    def _frame(self, entries: list[tuple[str, float, Any, pd.DataFrame]]) -> pd.DataFrame:
        """The log's rows of the queued requests, built column by column (one frame, not one per request)."""
        head: dict[str, list[Any]] = {"request_id": [], "row": [], "key": [], "served_at": []}
        served: dict[str, list[Any]] = {}
        total = 0
        for request_id, at, key, outputs in entries:
            n = len(outputs)
            head["request_id"] += [request_id] * n
            head["row"] += range(n)
            head["key"] += [None] * n if key is None else [None if pd.isna(v) else str(v) for v in key]
            head["served_at"] += [at] * n
            for column in outputs.columns:
                name = str(column) if str(column) not in LOG_COLUMNS else f"served_{column}"
                served.setdefault(name, [None] * total).extend(outputs[column].tolist())
            total += n
            for values in served.values():  # a column this request did not have
                values.extend([None] * (total - len(values)))
        frame = pd.DataFrame({
            "request_id": head["request_id"], "row": head["row"], "key": pd.array(head["key"], dtype="string"),
            "model_name": [self.model_name] * total, "model_version": [self.model_version] * total,
            "served_at": pd.to_datetime(head["served_at"], unit="s", utc=True),
        })  # fmt: skip
        return pd.concat([frame, pd.DataFrame(served)], axis=1)

    def _drop(self, rows: int, reason: str) -> None:
        with self._lock:
            self._counts["dropped_rows"] += rows
            self._last_error = reason
            now = time.monotonic()
            warn = now - self._last_warning >= WARN_EVERY_SECONDS or self._last_warning == 0.0
            if warn:
                self._last_warning = now
            counts = dict(self._counts)
        if warn:
            logger.warning("prediction log %s: %d rows dropped so far (%s); serving goes on", self.uri,
                           counts["dropped_rows"], reason)

    # --- the writer's side --------------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                self._lock.wait_for(lambda: self._closed or self._pending_rows >= self.batch_rows,
                                    timeout=self.flush_seconds)
                closed = self._closed
            self._write_pending()
            if closed:
                return

    def _write_pending(self) -> None:
        with self._lock:
            if not self._pending or self._writing:
                return
            frames, self._pending, self._pending_rows = self._pending, [], 0
            self._writing = True
        try:
            try:
                batch = self._frame(frames)
            except Exception as err:  # rows that cannot be framed (an odd served column): counted
                self._drop(sum(len(e[3]) for e in frames), f"could not frame the rows: {type(err).__name__}: {err}")
                return
            parts = [
                (day.isoformat(), rows.iloc[start : start + self.batch_rows])
                for day, rows in batch.groupby(batch["served_at"].dt.date, sort=True)
                for start in range(0, len(rows), self.batch_rows)
            ]
            for day, part in parts:
                try:
                    self._write_file(day, part)
                except Exception as err:  # unreachable, full, refused: counted, never raised
                    with self._lock:
                        self._counts["failed_writes"] += 1
                    self._drop(len(part), f"writing failed: {type(err).__name__}: {err}")
                    continue
                with self._lock:
                    self._counts["logged_rows"] += len(part)
                    self._counts["written_files"] += 1
        finally:
            with self._lock:
                self._writing = False
                self._lock.notify_all()

    def _write_file(self, day: str, part: pd.DataFrame) -> None:
        """One Parquet file of ``part`` under ``date=day`` (the day its rows were served), written whole."""
        import fsspec

        name = f"part-{int(self.clock() * 1000)}-{uuid.uuid4().hex[:12]}.parquet"
        fs, root = fsspec.core.url_to_fs(self.uri)
        folder = f"{root.rstrip('/')}/date={day}"
        fs.makedirs(folder, exist_ok=True)
        tmp, final = f"{folder}/_tmp-{name}", f"{folder}/{name}"
        with fs.open(tmp, "wb") as f:
            part.to_parquet(f, index=False)
        fs.mv(tmp, final)

    def flush(self, timeout: float = 30.0) -> bool:
        """Write what is queued now (from the caller's thread); True when nothing is left waiting."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._lock.wait_for(lambda: not self._writing, timeout=timeout)
        self._write_pending()
        with self._lock:
            self._lock.wait_for(lambda: not self._writing, timeout=max(0.0, deadline - time.monotonic()))
            return not self._pending

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued and stop the writer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._lock.notify_all()
        self._thread.join(timeout)

    def stats(self) -> dict[str, Any]:
        """Rows logged and files written, rows dropped and failed writes, rows waiting, the last problem."""
        with self._lock:
            return {**self._counts, "pending_rows": self._pending_rows, "last_error": self._last_error,
                    "uri": self.uri, "model_name": self.model_name, "model_version": self.model_version}


def prune_prediction_log(uri: str, keep_days: int, today: dt.date, *, dry_run: bool = False) -> list[str]:
    """Delete the log's ``date=YYYY-MM-DD`` partitions served more than ``keep_days`` days before ``today``
    (``serving.prediction_log_retention_days``); return their names, oldest first (with ``dry_run``: those that
    would go, nothing deleted). Only the top-level ``date=`` folders are looked at (one listing): anything else
    under ``uri`` is left, and today's partition, the one the serving processes write to, is never old enough."""
    import fsspec

    fs, root = fsspec.core.url_to_fs(uri)
    root = root.rstrip("/")
    if not fs.exists(root):
        return []
    first_kept = today - dt.timedelta(days=keep_days)
    old = []
    for path in fs.ls(root, detail=False):
        name = str(path).rstrip("/").rsplit("/", 1)[-1]
        match = _PARTITION.fullmatch(name)
        day = _day(match.group(1)) if match else None
        if day is not None and day < first_kept and fs.isdir(path):
            old.append((name, path))
    for _, path in [] if dry_run else sorted(old):
        fs.rm(path, recursive=True)
    return [name for name, _ in sorted(old)]


_PARTITION = re.compile(r"date=(\d{4}-\d{2}-\d{2})")


def _day(text: str) -> dt.date | None:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        return None
