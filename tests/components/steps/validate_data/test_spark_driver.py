"""The Spark application's main module: its options, its result record (the ValidationVerdict the cluster step
reads, on_spark_cluster.py) and its exit status."""

from __future__ import annotations

import json

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.handoffs import read_verdict
from ctpipe.components.steps.validate_data import spark_driver
from tests.fixtures.corpus import KEY, write_clean


def _args(tmp_path, data, config: Config) -> list[str]:
    return ["--data-uri", str(data), "--config-json", config.to_json(), "--snapshot", str(tmp_path / "snap"),
            "--data-docs", str(tmp_path / "docs.html"), "--report", str(tmp_path / "report.md"),
            "--result", str(tmp_path / "out" / "result.json")]


def test_a_clean_run_writes_the_snapshot_and_a_passed_record(spark, tmp_path):
    data = write_clean(tmp_path / "data")
    config = Config.from_dict({"data": {"key": KEY}})
    assert spark_driver.main(_args(tmp_path, data, config)) == 0
    result = read_verdict(tmp_path / "out" / "result.json")
    verdict = json.loads((tmp_path / "snap" / "validation.json").read_text())
    assert result.passed and not result.errors
    assert result.fingerprint == verdict["fingerprint"] and result.rows == verdict["rows"]
    assert sum(result.rows.values()) == 900 and (tmp_path / "snap" / "train.parquet").is_dir()
    assert (tmp_path / "docs.html").read_text().startswith("<!") and (tmp_path / "report.md").exists()
    assert spark.sparkContext._jsc is not None  # the application's session is left running


def test_bad_data_is_a_user_error_with_its_failing_checks(spark, tmp_path):
    data = write_clean(tmp_path / "data")
    part = next(data.glob("date=*/part-0.parquet"))
    part.write_bytes(b"not parquet")
    config = Config.from_dict({"data": {"key": KEY}})
    assert spark_driver.main(_args(tmp_path, data, config)) == 2
    result = read_verdict(tmp_path / "out" / "result.json")
    assert not result.passed and "cannot be read as parquet" in result.errors[0]
    assert [f["check"] for f in result.findings if not f["passed"]] == ["read_data"]
    assert not (tmp_path / "snap" / "validation.json").exists()


def test_a_config_that_is_not_json_is_a_user_error_with_no_verdict(tmp_path, capsys):
    args = _args(tmp_path, tmp_path, Config())
    args[3] = "{not json"
    assert spark_driver.main(args) == 2
    assert not (tmp_path / "out" / "result.json").exists()  # the step then reports the driver's exit 2 as a user error
    assert "--config-json is not JSON" in capsys.readouterr().err
