"""The ``retention`` section: what ``ctpipe gc`` keeps of a home's runs, checkpoints and MLflow runs.

The policy (docs/retention.md): the champion's lineage and every registered version's artifacts are
kept while the version is registered (the newest ``keep_versions``, the aliased ones, the rollback stack and
the last ``keep_champions`` champions stay registered; older versions are deregistered); of the other runs, the newest ``keep_last_runs`` and failed ones younger than
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
    # Registered versions kept: the newest this many, plus every aliased one, those in the rollback stack and
    # the last keep_champions champions; any other version is deleted from the registry, then its run.
    keep_versions: int = 20
    # The rollback stack and the champions kept: a rollback can go back this many champions.
    keep_champions: int = 10

    def __post_init__(self) -> None:
        check(1 <= self.keep_last_runs <= 10_000, "retention.keep_last_runs",
              f"{self.keep_last_runs!r} must be an integer in [1, 10000]: the newest runs always stay")
        check(0 <= self.keep_failed_days <= 3650, "retention.keep_failed_days",
              f"{self.keep_failed_days!r} must be in [0, 3650] days")
        check(1 <= self.killed_after_hours <= 24 * 365, "retention.killed_after_hours",
              f"{self.killed_after_hours!r} must be in [1, 8760] hours: a shorter one would kill runs still training")
        check(1 <= self.keep_versions <= 10_000, "retention.keep_versions",
              f"{self.keep_versions!r} must be an integer in [1, 10000]: the newest version always stays")
        check(2 <= self.keep_champions <= 100, "retention.keep_champions",
              f"{self.keep_champions!r} must be an integer in [2, 100]: the champion and at least one to roll back to")
