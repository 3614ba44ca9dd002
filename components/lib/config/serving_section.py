"""The ``serving`` section: what the registered model's serving wrapper does beside answering.

The prediction log (``components/lib/prediction_log.py``, docs/monitoring.md): every prediction with its
request id or the data's key, the model's name and version and the time, so that labels that arrive later
can be joined to what was served.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctpipe.components.lib.config.rules import check, check_range
from ctpipe.components.lib.credentials import uri_secrets


@dataclass(kw_only=True)
class ServingConfig:
    """The serving wrapper's prediction log (off unless ``prediction_log`` names a place)."""

    # An fsspec URI (a folder, s3://..., gs://...) for Parquet files partitioned by date=YYYY-MM-DD; null: off.
    prediction_log: str | None = None
    # Rows per Parquet file at most; a batch is written when it is full or prediction_log_flush_seconds old.
    prediction_log_batch_rows: int = 5000
    prediction_log_flush_seconds: float = 30.0
    # Rows waiting to be written at most (memory bound): a request beyond it is counted as dropped, never blocked.
    prediction_log_max_pending_rows: int = 100_000
    # The watcher deletes the log's date= partitions served more than this many days ago (at least what the
    # decay check reads: watch.decay.lookback_days, and every cohort still waiting for its labels); null keeps
    # them forever (a store's own lifecycle rule expires them).
    prediction_log_retention_days: int | None = 90

    def __post_init__(self) -> None:
        if self.prediction_log is not None:
            check(bool(self.prediction_log.strip()), "serving.prediction_log", "must be a URI or null (off)")
            # The config is recorded with every run and version: the store's credentials go in its environment.
            found = uri_secrets(self.prediction_log)
            check(not found, "serving.prediction_log",
                  f"the URI holds credentials ({', '.join(found)}); the config is recorded with every run and model "
                  "version, so it must not carry secrets: give the storage's credentials in the serving environment")
        check_range(self.prediction_log_batch_rows, "serving.prediction_log_batch_rows", 1, 10_000_000)
        check_range(self.prediction_log_flush_seconds, "serving.prediction_log_flush_seconds", 0, 86_400.0,
                    low_open=True)
        check_range(self.prediction_log_max_pending_rows, "serving.prediction_log_max_pending_rows", 1, 100_000_000)
        if self.prediction_log_retention_days is not None:
            check_range(self.prediction_log_retention_days, "serving.prediction_log_retention_days", 1, 36_500,
                        why=" or null (kept forever)")
