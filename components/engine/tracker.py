"""Rank 0's MLflow logging into the pipeline's run: buffered per-step metrics, params, artifacts.

Other ranks get a ``NullTracker`` and never import mlflow. Metrics are buffered and sent in batches so
per-step logging costs the training loop almost nothing; ``close`` flushes on every exit path. Every
call goes through ``ctpipe.components.lib.tracking``'s retrying call (``registry.retries``), as every step's does:
a tracking server that is down for a moment must not fail a training run that is otherwise fine.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ctpipe.components.lib.tracking.retry import RetryPolicy, bounded_mlflow_http
from ctpipe.components.lib.tracking.training_runs import TRAINED_PREFIX

T = TypeVar("T")

FLUSH_EVERY = 200  # buffered metric points per MLflow request


class NullTracker:
    """What non-zero ranks (and runs without MLflow) use: every call does nothing."""

    def log_params(self, params: dict[str, Any]) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        pass

    def set_tags(self, tags: dict[str, str]) -> None:
        pass

    def log_artifact(self, path: str | Path, artifact_path: str) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class MlflowTracker(NullTracker):
    """Logs into an existing MLflow run by id (created by the pipeline's prepare step).

    Metric batches are sent from a background thread, so a slow tracking store never stalls the step
    (and with it every other rank at the next collective); ``close`` drains the queue.
    """

    def __init__(self, tracking_uri: str, run_id: str, retry: RetryPolicy) -> None:
        import mlflow

        from ctpipe.components.lib.tracking import use_tracking

        # From here to ``close`` MLflow's HTTP client fails fast (no internal retries, a request timeout),
        # so ``retry`` owns the retry budget, for the sender thread's calls too.
        self._bounded = contextlib.ExitStack()
        self._bounded.enter_context(bounded_mlflow_http())
        use_tracking(tracking_uri)
        self.client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        self.run_id, self.retry = run_id, retry
        self._buffer: list[Any] = []
        self._queue: queue.Queue[list[Any] | None] = queue.Queue()
        self._sender = threading.Thread(target=self._send_batches, name="mlflow-metrics", daemon=True)
        self._sender.start()
        self.failures: list[str] = []

    def _send_batches(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                for start in range(0, len(batch), 1000):
                    part = batch[start : start + 1000]
                    self._call(lambda part=part: self.client.log_batch(self.run_id, metrics=part), "log metrics on")
            except Exception as err:  # losing metric points must not kill a training run
                self.failures.append(f"{type(err).__name__}: {err}")

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException

        existing = self._call(lambda: self.client.get_run(self.run_id).data.params, "read the params of")
        # Params are immutable in MLflow: on resume or retry, only send what is not there yet. A value that
        # differs from what the run already has (prepare's config, before tuning) goes beside it as trained.<key>.
        values = {k: str(v) for k, v in params.items()}
        fresh = [Param(k, v) for k, v in values.items() if k not in existing]
        fresh += [Param(TRAINED_PREFIX + k, v) for k, v in values.items()
                  if k in existing and existing[k] != v and TRAINED_PREFIX + k not in existing]
        for start in range(0, len(fresh), 100):
            part = fresh[start : start + 100]
            try:
                self._call(lambda part=part: self.client.log_batch(self.run_id, params=part), "log the params on")
            except MlflowException:
                pass  # another step logged a different value under the same key; keep theirs

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self._buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items())
        if len(self._buffer) >= FLUSH_EVERY:
            self.flush()

    def set_tags(self, tags: dict[str, str]) -> None:
        from mlflow.entities import RunTag

        batch = [RunTag(k, str(v)[:5000]) for k, v in tags.items()]
        self._call(lambda: self.client.log_batch(self.run_id, tags=batch), "set the training tags on")

    def log_artifact(self, path: str | Path, artifact_path: str) -> None:
        self._call(lambda: self.client.log_artifact(self.run_id, str(path), artifact_path),
                   f"log {artifact_path}/{Path(path).name} on")

    def _call(self, fn: Callable[[], T], what: str) -> T:
        return self.retry.call(fn, f"{what} MLflow run {self.run_id}")

    def flush(self) -> None:
        if self._buffer:
            self._queue.put(self._buffer)
            self._buffer = []

    def close(self) -> None:
        """Send what is buffered and wait for the sender to finish."""
        self.flush()
        self._queue.put(None)
        self._sender.join(timeout=60)
        self._bounded.close()
        if self.failures:
            print(
                f"[train] WARNING: {len(self.failures)} MLflow metric batch(es) failed: {self.failures[0]}",
                flush=True,
            )


def make_tracker(rank: int, tracking_uri: str | None, run_id: str | None, *, retry: RetryPolicy) -> NullTracker:
    """MLflow on rank 0 when a tracking URI and run id are given; nothing elsewhere."""
    if rank != 0 or not tracking_uri or not run_id:
        return NullTracker()
    return MlflowTracker(tracking_uri, run_id, retry)
