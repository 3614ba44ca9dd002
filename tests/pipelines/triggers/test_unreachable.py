"""An unreachable tracking server is reported after the first failed attempt, with the time left, not after the
whole retry budget (issue 46: `ctpipe watch` with an unreachable --tracking-uri was silent for minutes)."""

from __future__ import annotations

import logging
import time

import pytest

from ctpipe.components.lib.tracking import RetryPolicy
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.triggers.champion import find_champion
from ctpipe.testing.mlflow_server import free_port


def test_the_champion_lookup_reports_an_unreachable_server_at_its_first_failure_with_the_time_left(caplog):
    port = free_port()  # nothing listens there: every request is refused at once
    policy = RetryPolicy(retries=3, backoff_seconds=0.05, budget_seconds=600.0)
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError, match=r"read the 'champion' alias of 'm': 4 attempts"):
        find_champion(f"http://127.0.0.1:{port}", "m", "champion", retry=policy)
    # MLflow's own HTTP retries (minutes of silent backoff per attempt) are off: each attempt fails at once.
    assert time.monotonic() - started < 60
    warnings = [r.getMessage() for r in caplog.records if "MLflow unavailable" in r.getMessage()]
    assert len(warnings) == 3
    first = warnings[0]  # after the first failed attempt: where, what failed, and the time left of the budget
    assert f"127.0.0.1:{port}" in first and "retry 1 (" in first and "of the 600s retry budget left" in first


def test_watch_with_an_unreachable_tracking_server_fails_in_one_paragraph_as_infrastructure(tmp_path, capsys):
    from ctpipe.components.lib.data.demo import write_demo_data

    write_demo_data(tmp_path / "data", days=2, rows_per_day=40, seed=0)
    code = main(["watch", "--data", str(tmp_path / "data"), "--home", str(tmp_path / "home"), "--once", "--dry-run",
                 "--tracking-uri", f"http://127.0.0.1:{free_port()}", "--set", "registry.retry_budget_seconds=0"])
    err = capsys.readouterr().err
    assert code == 1  # not the user's input: the watcher's CronJob retries it
    assert "ctpipe watch: error: MLflow was unavailable while trying to read the 'champion' alias" in err
    assert "Traceback" not in err


def test_a_tracking_server_that_does_not_answer_is_named_at_once_and_a_local_store_never_is(tmp_path):
    from ctpipe.components.lib.tracking.retry import unreachable

    why = unreachable(f"http://127.0.0.1:{free_port()}", timeout_seconds=2)
    assert why and "ConnectionError" in why
    assert unreachable(f"sqlite:///{tmp_path}/mlflow.db") is None and unreachable(str(tmp_path)) is None
