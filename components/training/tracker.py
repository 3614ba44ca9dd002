"""Rank 0's MLflow logging into the pipeline's run: buffered per-step metrics, params, artifacts.

Other ranks get a ``NullTracker`` and never import mlflow. Metrics are buffered and sent in batches so
per-step logging costs the training loop almost nothing; ``close`` flushes on every exit path.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any

FLUSH_EVERY = 200  # buffered metric points per MLflow request


def flatten(values: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config values as flat ``section.field`` params (MLflow params are strings)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)[:6000]
    return out


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

    def __init__(self, tracking_uri: str, run_id: str) -> None:
        import mlflow

        from components.tracking import use_tracking

        use_tracking(tracking_uri)
        self.client = mlflow.MlflowClient(tracking_uri=tracking_uri)
        self.run_id = run_id
        self._buffer: list[Any] = []
        self._queue: queue.Queue[list[Any] | None] = queue.Queue()
        self._sender = threading.Thread(target=self._send_batches, name="mlflow-metrics", daemon=True)
        self._sender.start()
        self.failures: list[str] = []

    def _send_batches(self) -> None:
        while (batch := self._queue.get()) is not None:
            try:
                for start in range(0, len(batch), 1000):
                    self.client.log_batch(self.run_id, metrics=batch[start : start + 1000])
            except Exception as err:  # losing metric points must not kill a training run
                self.failures.append(f"{type(err).__name__}: {err}")

    def log_params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.exceptions import MlflowException

        existing = self.client.get_run(self.run_id).data.params
        # Params are immutable in MLflow: on resume or retry, only send what is not there yet.
        fresh = [Param(k, str(v)) for k, v in params.items() if k not in existing]
        for start in range(0, len(fresh), 100):
            try:
                self.client.log_batch(self.run_id, params=fresh[start : start + 100])
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

        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def log_artifact(self, path: str | Path, artifact_path: str) -> None:
        self.client.log_artifact(self.run_id, str(path), artifact_path)

    def flush(self) -> None:
        if self._buffer:
            self._queue.put(self._buffer)
            self._buffer = []

    def close(self) -> None:
        """Send what is buffered and wait for the sender to finish."""
        self.flush()
        self._queue.put(None)
        self._sender.join(timeout=60)
        if self.failures:
            print(
                f"[train] WARNING: {len(self.failures)} MLflow metric batch(es) failed: {self.failures[0]}",
                flush=True,
            )


def make_tracker(rank: int, tracking_uri: str | None, run_id: str | None) -> NullTracker:
    """MLflow on rank 0 when a tracking URI and run id are given; nothing elsewhere."""
    if rank != 0 or not tracking_uri or not run_id:
        return NullTracker()
    return MlflowTracker(tracking_uri, run_id)
