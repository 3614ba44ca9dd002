"""The prediction log: rows written with the version that served them; a full or unwritable log never fails or
blocks a request (the rows are counted as dropped)."""

from __future__ import annotations

import time

import pandas as pd
import pytest

from ctpipe.components.lib.config import Config, ConfigError
from ctpipe.components.lib.prediction_log import (
    ENV_MODEL_VERSION,
    ENV_URI,
    PredictionLog,
    serving_environment,
)


def served(n: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    inputs = pd.DataFrame({"customer_id": [f"c{i}" for i in range(n)], "x": range(n)}, index=range(100, 100 + n))
    outputs = pd.DataFrame({"predicted_class": ["yes" if i % 2 else "no" for i in range(n)],
                            "yes": [0.1 * (i % 10) for i in range(n)]}, index=inputs.index)
    return inputs, outputs


def test_rows_are_written_by_date_with_the_version_key_and_prediction(tmp_path):
    clock = [1_790_000_000.0]  # 2026-09-21 UTC
    log = PredictionLog(str(tmp_path / "log"), model_name="churn", model_version="7", key_column="customer_id",
                        batch_rows=4, flush_seconds=60, clock=lambda: clock[0])
    inputs, outputs = served(6)
    log.log(inputs, outputs, request_id="r1")
    log.log(*served(3), request_id="r2")
    assert log.flush(10)
    log.close()
    files = sorted((tmp_path / "log" / "date=2026-09-21").glob("*.parquet"))
    assert files and all(not f.name.startswith(("_", ".")) for f in files)
    assert len(files) == 3  # 9 rows in batches of at most 4
    rows = pd.concat([pd.read_parquet(f) for f in files]).sort_values(["request_id", "row"]).reset_index(drop=True)
    assert len(rows) == 9 and set(rows["model_version"]) == {"7"} and set(rows["model_name"]) == {"churn"}
    first = rows[rows["request_id"] == "r1"].reset_index(drop=True)
    assert list(first["key"]) == list(inputs["customer_id"]) and list(first["row"]) == list(range(6))
    assert list(first["predicted_class"]) == list(outputs["predicted_class"])
    assert first["yes"].tolist() == pytest.approx(outputs["yes"].tolist())
    assert str(first["served_at"].dt.tz) == "UTC"
    assert log.stats()["logged_rows"] == 9 and log.stats()["dropped_rows"] == 0


def test_an_unwritable_log_never_fails_a_request_and_counts_the_rows(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    log = PredictionLog(str(blocker / "log"), model_name="m", model_version="1", batch_rows=2, flush_seconds=60)
    for _ in range(3):
        log.log(*served(2))  # returns at once; the writer fails in the background
    log.flush(10)
    stats = log.stats()
    assert stats["logged_rows"] == 0 and stats["dropped_rows"] == 6 and stats["failed_writes"] >= 1
    assert "writing failed" in stats["last_error"]
    log.close()


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path, monkeypatch):
    log = PredictionLog(str(tmp_path / "log"), model_name="m", model_version="1", batch_rows=1000,
                        flush_seconds=60, max_pending_rows=10)
    started = time.perf_counter()
    for _ in range(5):
        log.log(*served(4))
    assert time.perf_counter() - started < 5  # generous: the point is no wait on the store
    stats = log.stats()
    assert stats["pending_rows"] == 8 and stats["dropped_rows"] == 12 and "queue is full" in stats["last_error"]
    log.close()
    assert log.stats()["logged_rows"] == 8


def test_a_request_whose_rows_cannot_be_framed_is_counted_not_raised(tmp_path):
    log = PredictionLog(str(tmp_path / "log"), model_name="m", model_version="1", key_column="customer_id")
    log.log("not a frame", *served(2)[1:])  # type: ignore[arg-type]
    assert log.stats()["dropped_rows"] == 2
    log.close()


def test_the_serving_section_sets_the_environment_and_refuses_credentials():
    assert serving_environment(Config().serving, "m", "3") == {}
    config = Config.from_dict({"serving": {"prediction_log": "s3://bucket/predictions"}})
    env = serving_environment(config.serving, "m", "3")
    assert env[ENV_URI] == "s3://bucket/predictions" and env[ENV_MODEL_VERSION] == "3"
    assert PredictionLog.from_environment({}) is None
    with pytest.raises(ConfigError, match="serving.prediction_log"):
        Config.from_dict({"serving": {"prediction_log": "s3://bucket/p?sig=abc123"}})


def test_rows_go_to_the_day_they_were_served_not_the_day_they_were_written(tmp_path):
    clock = [1_790_035_199.0]  # 2026-09-21 23:59:59 UTC
    log = PredictionLog(str(tmp_path / "log"), model_name="m", model_version="1", flush_seconds=60,
                        clock=lambda: clock[0])
    log.log(*served(2), request_id="before")
    clock[0] += 2  # past midnight, then one batch written
    log.log(*served(3), request_id="after")
    assert log.flush(10)
    log.close()
    before = pd.concat(pd.read_parquet(f) for f in (tmp_path / "log" / "date=2026-09-21").glob("*.parquet"))
    after = pd.concat(pd.read_parquet(f) for f in (tmp_path / "log" / "date=2026-09-22").glob("*.parquet"))
    assert set(before["request_id"]) == {"before"} and set(after["request_id"]) == {"after"}
