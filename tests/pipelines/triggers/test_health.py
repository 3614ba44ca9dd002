"""Freshness and silent failures: a stale champion, a stopped data feed and failing runs raise the alert
(``ctpipe watch --once --alert`` exits 1, ``HOME/watch/health.json`` says why); a healthy home does not."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import time
from pathlib import Path

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.triggers.health import failed_streak, health_path
from tests.pipelines.triggers.test_watch import check, register_champion

DAY = 86400.0


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("health-template")
    write_demo_data(base / "data", days=3, rows_per_day=200)
    register_champion(base / "home", base / "data")
    return base / "data", base / "home"


@pytest.fixture
def site(template, tmp_path) -> tuple[Path, Path]:
    """A fresh copy of the data root and the home with a champion registered just now, for one test."""
    for part in template:
        shutil.copytree(part, tmp_path / part.name)
    return tmp_path / "data", tmp_path / "home"


def add_partition(data: Path, when: float) -> None:
    """A partition dated ``when``'s day (a copy of the first demo partition): the feed delivering."""
    day = dt.datetime.fromtimestamp(when, dt.UTC).date().isoformat()
    target = data / f"date={day}"
    if not target.exists():
        shutil.copytree(next(data.glob("date=*")), target)


def problems(decision) -> list[str]:
    return decision.health["problems"]


def test_a_healthy_home_raises_no_alert(site):
    data, home = site
    now = time.time() + 3600  # champion registered an hour ago, a partition of today
    add_partition(data, now)
    decision = check(data, home, now=now)
    assert problems(decision) == [] and decision.health["alert"] is False
    assert decision.health["champion_age_days"] < 1 and decision.health["data_gap_days"] < 1
    written = json.loads(health_path(home).read_text())
    assert written["alert"] is False and written["newest_partition"] == decision.health["newest_partition"]
    assert "health: ok" in decision.to_text()


def test_a_stopped_feed_raises_the_alert_and_a_new_partition_clears_it(site):
    data, home = site
    t0 = time.time() + 3600
    add_partition(data, t0)
    assert problems(check(data, home, now=t0)) == []
    # Nothing new for four days (default watch.max_data_gap_days=3): the watcher remembers when it arrived.
    stopped = check(data, home, now=t0 + 4 * DAY)
    assert [p for p in problems(stopped) if p.startswith("data feed stopped")], problems(stopped)
    assert 3.9 < stopped.health["data_gap_days"] < 4.1
    assert json.loads(health_path(home).read_text())["alert"] is True
    add_partition(data, t0 + 4 * DAY)
    assert problems(check(data, home, now=t0 + 4 * DAY + 60)) == []


def test_a_feed_that_stopped_before_the_watcher_started_is_caught(site):
    data, home = site  # demo partitions of January 2026; the champion is fresh
    newest = max(p.name for p in data.glob("date=*"))
    day = dt.date.fromisoformat(newest.split("=")[1])
    now = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC).timestamp() + 10 * DAY
    decision = check(data, home, now=now)
    stopped = [p for p in problems(decision) if p.startswith("data feed stopped")]
    assert stopped and newest in stopped[0] and 8.9 < decision.health["data_gap_days"] < 9.1


def test_a_stale_champion_raises_the_alert_and_the_cli_exits_1(site):
    data, home = site
    later = time.time() + 40 * DAY
    add_partition(data, later)
    decision = check(data, home, now=later)
    assert [p for p in problems(decision) if p.startswith("stale champion: version 1")], problems(decision)
    assert decision.health["champion_age_days"] > 39
    # The same home under the CLI: exit 1 with --alert, 0 without; a longer limit clears it.
    args = ["watch", "--data", str(data), "--home", str(home), "--once", "--dry-run", "--set", "watch.min_rows=100",
            "--set", "watch.max_data_gap_days=0"]
    assert main([*args, "--set", "watch.max_model_age_days=0.0000001", "--alert"]) == 1
    assert main([*args, "--set", "watch.max_model_age_days=0.0000001"]) == 0
    assert main([*args, "--alert"]) == 0  # registered moments ago by the wall clock the CLI uses
    assert main(["watch", "--data", str(data), "--home", str(home), "--alert"]) == 2  # --alert needs --once


def test_failed_runs_in_a_row_count_back_to_the_last_success():
    def record(*statuses, start=0.0):
        return {"attempts": [{"status": s, "started_at": start + i} for i, s in enumerate(statuses)]}

    assert failed_streak([record("succeeded", "failed", start=0), record("lost", "failed", start=10)]) == 3
    assert failed_streak([record("failed", "failed", start=0), record("succeeded", start=10)]) == 0
    # Canceled (an operator's decision) and still running attempts neither break nor extend a streak.
    assert failed_streak([record("failed", "canceled", "failed", "running", start=0)]) == 2
    assert failed_streak([]) == 0


def test_failing_runs_raise_the_alert(site):
    data, home = site
    now = time.time() + 3600
    add_partition(data, now)
    ledger_dir = home / "watch" / "ledger"
    ledger_dir.mkdir(parents=True, exist_ok=True)
    for n in range(3):
        attempts = [{"attempt": 1, "status": "failed", "failure": "infrastructure", "started_at": now - 100 + n}]
        (ledger_dir / f"{n:064x}.json").write_text(json.dumps(
            {"fingerprint": f"{n:064x}", "claimed_at": now - 100 + n, "status": "failed", "attempt": 1,
             "attempts": attempts}))
    decision = check(data, home, now=now)
    assert [p for p in problems(decision) if p.startswith("runs failing: the last 3 runs")], problems(decision)
    assert decision.health["failed_runs_in_a_row"] == 3


def _health_runs(home: Path) -> list:
    import mlflow

    from ctpipe.components.lib.tracking.store import local_tracking_uri

    client = mlflow.MlflowClient(tracking_uri=local_tracking_uri(home))
    experiment = client.get_experiment_by_name("ctpipe-watch")
    if experiment is None:
        return []
    return client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])


def _history(home: Path, run_id: str, name: str) -> list:
    import mlflow

    from ctpipe.components.lib.tracking.store import local_tracking_uri

    return mlflow.MlflowClient(tracking_uri=local_tracking_uri(home)).get_metric_history(run_id, name)


def test_the_figures_reach_mlflow_hourly_and_at_once_when_the_alert_changes(site):
    data, home = site
    now = time.time() + 3600
    add_partition(data, now)
    first = check(data, home, now=now)
    (run,) = _health_runs(home)
    assert first.health["mlflow"] == run.info.run_id and run.info.status == "FINISHED"
    assert run.data.metrics["champion_age_days"] == pytest.approx(first.health["champion_age_days"])
    assert run.data.metrics["failed_runs_in_a_row"] == 0 and run.data.metrics["alert"] == 0
    assert check(data, home, now=now + 600).health["mlflow"] is None  # ten minutes on, nothing changed
    assert check(data, home, now=now + 3700).health["mlflow"] == run.info.run_id  # an hour on: the next point
    # Four days without a partition: the feed alert is logged at once, not an hour late.
    late = check(data, home, now=now + 3700 + 4 * DAY)
    assert late.health["alert"] is True and late.health["mlflow"] == run.info.run_id
    points = _history(home, run.info.run_id, "alert")
    assert [(p.step, p.value) for p in points] == [(0, 0.0), (1, 0.0), (2, 1.0)]
    assert points[-1].timestamp == int((now + 3700 + 4 * DAY) * 1000)


def test_the_health_runs_stay_bounded(site):
    data, home = site
    now = time.time() + 3600
    add_partition(data, now)
    seen = set()
    for hour in range(7):
        decision = check(data, home, now=now + hour * 3600, overrides=["watch.health_points_per_run=2"])
        seen.add(decision.health["mlflow"])
    runs = _health_runs(home)
    assert len(seen) == 4 and len(runs) == 2  # 7 points, 2 a run: 4 runs made, the newest two kept
    assert [len(_history(home, r.info.run_id, "alert")) for r in runs] == [2, 1]


def test_health_metrics_can_be_turned_off(site):
    data, home = site
    now = time.time() + 3600
    add_partition(data, now)
    assert check(data, home, now=now, overrides=["watch.health_metrics_seconds=0"]).health["mlflow"] is None
    assert _health_runs(home) == []
