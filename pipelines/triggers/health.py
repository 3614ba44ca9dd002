"""Freshness and silent failures: is the champion stale, has the data feed stopped, do the runs keep failing?

Every check of ``ctpipe watch`` judges three figures and writes them whole to ``HOME/watch/health.json`` (one
small file, replaced atomically), which an alerting stack reads (docs/monitoring.md); ``--alert`` makes the
check exit 1 when one is over its limit, so a CronJob's failed Job alerts too.

- the champion's age: days since its version was registered (``watch.max_model_age_days``);
- the data gap: days since a new partition last arrived (``watch.max_data_gap_days``). Arrival is when the
  watcher first saw the current newest partition (kept in the same file: new partitions sort last, and
  retention deleting old ones is no arrival); a home that never saw the data
  before takes the newest ``date=YYYY-MM-DD`` partition's day, so a feed that stopped before the watcher
  started is still caught;
- failed runs in a row: the newest attempts the watcher started that ended, counted back to the last success
  (``watch.max_failed_runs``). A canceled run is an operator's decision and neither breaks nor extends a streak.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import WatchConfig
from ctpipe.pipelines.triggers.champion import Champion
from ctpipe.pipelines.triggers.ledger import Ledger
from ctpipe.pipelines.triggers.new_data import DataState, partition_date

HEALTH_FILE = "health.json"
DAY = 86400.0
FAILED = ("failed", "lost")


@dataclass
class Health:
    """The freshness figures of one check, their limits and what is wrong (``problems`` empty: healthy)."""

    checked_at: float
    champion_version: str | None
    champion_age_days: float | None
    max_model_age_days: float
    partitions: int
    newest_partition: str | None
    data_arrived_at: float | None
    data_gap_days: float | None
    max_data_gap_days: float
    failed_runs_in_a_row: int
    max_failed_runs: int
    problems: list[str] = field(default_factory=list)

    @property
    def alert(self) -> bool:
        return bool(self.problems)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "alert": self.alert}

    def to_text(self) -> str:
        if not self.problems:
            return "health: ok (champion age, data arrival and recent runs within their limits)"
        return "health: ALERT\n" + "\n".join(f"  - {p}" for p in self.problems)


def health_path(home: str | Path) -> Path:
    return Path(home) / "watch" / HEALTH_FILE


def judge_health(
    *, home: str | Path, state: DataState, champion: Champion | None, watch: WatchConfig, now: float, write: bool = True
) -> Health:
    """The champion's age, the data gap and the failed-run streak against ``watch``'s limits; written to
    ``HOME/watch/health.json`` unless ``write`` is false (a dry run changes nothing in the home)."""
    partitions = state.partitions()
    arrived = _arrival(health_path(home), partitions, now)
    age = (now - champion.created_at) / DAY if champion is not None and champion.created_at else None
    gap = (now - arrived) / DAY if arrived is not None else None
    streak = failed_streak(Ledger(home).records())
    health = Health(
        checked_at=now, champion_version=champion.version if champion else None, champion_age_days=age,
        max_model_age_days=watch.max_model_age_days, partitions=len(partitions),
        newest_partition=partitions[-1] if partitions else None, data_arrived_at=arrived, data_gap_days=gap,
        max_data_gap_days=watch.max_data_gap_days, failed_runs_in_a_row=streak, max_failed_runs=watch.max_failed_runs,
    )  # fmt: skip
    if watch.max_model_age_days and age is not None and age > watch.max_model_age_days:
        health.problems.append(
            f"stale champion: version {champion.version} was registered {age:.1f} days ago "
            f"(watch.max_model_age_days={watch.max_model_age_days:g})"
        )
    if watch.max_data_gap_days and gap is not None and gap > watch.max_data_gap_days:
        health.problems.append(
            f"data feed stopped: no new partition for {gap:.1f} days, the newest is {health.newest_partition} "
            f"(watch.max_data_gap_days={watch.max_data_gap_days:g})"
        )
    elif watch.max_data_gap_days and not partitions:
        health.problems.append("data feed stopped: the data root has no partitions")
    if watch.max_failed_runs and streak >= watch.max_failed_runs:
        health.problems.append(
            f"runs failing: the last {streak} runs the watcher started all failed "
            f"(watch.max_failed_runs={watch.max_failed_runs}); see 'ctpipe watch --status'"
        )
    if write:
        atomic_write_text(health_path(home), json.dumps(health.to_dict(), indent=1))
    return health


def _arrival(path: Path, partitions: list[str], now: float) -> float | None:
    """When the newest partition arrived: the same as at the last check, the time recorded then; another, now;
    never seen by this home, the day after its date when it is dated (else now)."""
    try:
        previous = json.loads(path.read_text())
    except (OSError, ValueError):
        previous = None
    if isinstance(previous, dict) and previous.get("data_arrived_at") is not None:
        if partitions and previous.get("newest_partition") == partitions[-1]:
            return float(previous["data_arrived_at"])
        return now
    if not partitions:
        return None
    day = partition_date(partitions[-1])
    if day is None:
        return now
    # The day after the partition's date: a daily partition holds that whole day.
    midnight = dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=dt.UTC).timestamp()
    return min(midnight, now)


def failed_streak(records: list[dict[str, Any]]) -> int:
    """How many of the newest ended attempts (every data version's, by start) failed since the last success."""
    ended = []
    for record in records:
        for attempt in record.get("attempts") or []:
            status = attempt.get("status")
            if status in FAILED or status == "succeeded":
                when = attempt.get("started_at") or attempt.get("attempt_claimed_at") or record.get("claimed_at") or 0
                ended.append((float(when), status))
    streak = 0
    for _, status in sorted(ended, reverse=True):
        if status == "succeeded":
            break
        streak += 1
    return streak
