"""A year unattended: the watcher keeps its reports folder and the prediction log bounded, and never deletes what
the decay check still reads."""

from __future__ import annotations

import datetime as dt
import os

import pandas as pd
import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.prediction_log import prune_prediction_log
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.triggers.housekeeping import prune_reports

TODAY = dt.date(2026, 6, 30)


def write_log(root, days_back):
    for back in days_back:
        folder = root / f"date={(TODAY - dt.timedelta(days=back)).isoformat()}"
        folder.mkdir(parents=True)
        pd.DataFrame({"key": ["a"], "predicted_class": ["stay"]}).to_parquet(folder / "part-1.parquet")


def test_old_partitions_of_the_prediction_log_go_and_everything_else_stays(tmp_path):
    write_log(tmp_path, [0, 3, 14, 89, 90, 91, 400])
    (tmp_path / "README").write_text("not a partition")
    (tmp_path / "date=not-a-day").mkdir()
    deleted = prune_prediction_log(str(tmp_path), 90, TODAY)
    assert deleted == ["date=2025-05-26", "date=2026-03-31"]  # 400 and 91 days back
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["README", "date=2026-04-01", "date=2026-04-02", "date=2026-06-16", "date=2026-06-27",
                    "date=2026-06-30", "date=not-a-day"]
    assert prune_prediction_log(str(tmp_path), 90, TODAY) == []
    assert prune_prediction_log(str(tmp_path / "none-yet"), 90, TODAY) == []


def test_a_retention_shorter_than_the_decay_check_reads_is_refused():
    with pytest.raises(ConfigError, match=r"serving.prediction_log_retention_days.*at least 14"):
        load_config(None, ["serving.prediction_log_retention_days=10"])
    with pytest.raises(ConfigError, match=r"serving.prediction_log_retention_days.*at least 31"):
        load_config(None, ["serving.prediction_log_retention_days=20", "watch.decay.label_delay_days=30"])
    with pytest.raises(ConfigError, match="watch.keep_reports"):
        load_config(None, ["watch.keep_reports=0"])
    assert load_config(None, ["serving.prediction_log_retention_days=14"]).serving.prediction_log_retention_days == 14
    assert load_config(None, ["serving.prediction_log_retention_days=null"]).serving.prediction_log_retention_days is None
    assert load_config(None, []).serving.prediction_log_retention_days == 90


def test_the_reports_folder_keeps_the_newest_reports_of_each_kind(tmp_path):
    for i in range(5):
        for name in (f"decay-1-2026-06-0{i + 1}", f"drift-{i:020d}"):
            for suffix in (".json", ".html"):
                (tmp_path / f"{name}{suffix}").write_text("{}")
                os.utime(tmp_path / f"{name}{suffix}", (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "other.json").write_text("{}")
    assert len(prune_reports(tmp_path, 2, dry_run=True)) == 12 and len(list(tmp_path.iterdir())) == 21
    deleted = prune_reports(tmp_path, 2)
    assert len(deleted) == 12  # three of each kind, with their pages
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["decay-1-2026-06-04.html", "decay-1-2026-06-04.json", "decay-1-2026-06-05.html",
                    "decay-1-2026-06-05.json", f"drift-{3:020d}.html", f"drift-{3:020d}.json", f"drift-{4:020d}.html",
                    f"drift-{4:020d}.json", "other.json"]


def test_every_watcher_check_prunes_the_log_and_says_so_but_a_dry_run_deletes_nothing(tmp_path):
    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.pipelines.triggers.start import FunctionStarter
    from tests.pipelines.triggers.test_watch import Counter, check

    write_demo_data(tmp_path / "data", days=2, rows_per_day=50)
    write_log(tmp_path / "log", [0, 20, 40])
    now = pd.Timestamp(TODAY.isoformat(), tz="UTC").timestamp() + 3600
    settings = [f"serving.prediction_log={tmp_path / 'log'}", "serving.prediction_log_retention_days=30"]
    dry = check(tmp_path / "data", tmp_path / "home", now=now, overrides=settings)
    assert dry.housekeeping["prediction_log_deleted"] == ["date=2026-05-21"] and dry.housekeeping["dry_run"]
    assert len(list((tmp_path / "log").iterdir())) == 3
    decision = check(tmp_path / "data", tmp_path / "home", FunctionStarter(Counter()), now=now, overrides=settings)
    assert decision.housekeeping["prediction_log_deleted"] == ["date=2026-05-21"]
    assert sorted(p.name for p in (tmp_path / "log").iterdir()) == ["date=2026-06-10", "date=2026-06-30"]
