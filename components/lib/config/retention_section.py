"""The ``retention`` section: what ``ctpipe gc`` keeps of a home's runs, checkpoints and MLflow runs.

The policy (docs/retention.md): the champion's lineage and every registered version's artifacts are
always kept; of the other runs, the newest ``keep_last_runs`` and failed ones younger than
``keep_failed_days``; finished runs lose their checkpoints (the exported model stays); a run whose
process is gone without a summary is killed, and its MLflow run is marked KILLED.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctpipe.components.lib.config.rules import check


@dataclass(kw_only=True)
class RetentionConfig:
    """How much of a home ``ctpipe gc`` keeps."""

    # The newest this many runs keep their run folder, pipeline-root folder and MLflow run (1 to 10,000).
    keep_last_runs: int = 10
    # A failed (or killed) run is kept whole, checkpoints included, this many days for debugging and resume.
    keep_failed_days: float = 7.0
    # Finished runs (succeeded, or failed past keep_failed_days) lose their checkpoints; the export stays.
    delete_checkpoints: bool = True
    # An MLflow run still RUNNING this many hours after it started, with no live local process, is KILLED.
    killed_after_hours: float = 48.0

    def __post_init__(self) -> None:
        check(1 <= self.keep_last_runs <= 10_000, "retention.keep_last_runs",
              f"{self.keep_last_runs!r} must be an integer in [1, 10000]: the newest runs always stay")
        check(0 <= self.keep_failed_days <= 3650, "retention.keep_failed_days",
              f"{self.keep_failed_days!r} must be in [0, 3650] days")
        check(1 <= self.killed_after_hours <= 24 * 365, "retention.killed_after_hours",
              f"{self.killed_after_hours!r} must be in [1, 8760] hours: a shorter one would kill runs still training")
