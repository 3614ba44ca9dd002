"""train.batch_size above the rows each worker gets stops validation (a user error), not the ranks after sanity."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.components.steps.validate_data.test_corpus import fast_config, run_gate
from tests.fixtures.corpus import KEY, write_clean


def config_with(**train) -> Config:
    base = fast_config().to_dict()
    return Config.from_dict({**base, "train": {**base["train"], **train}})


def test_a_batch_larger_than_the_rows_per_worker_stops_validation_naming_the_setting_and_the_fix(tmp_path):
    data = write_clean(tmp_path / "data")  # 900 rows, about 720 of them in train: about 360 per worker
    step, message = run_gate(data, config_with(batch_size=500, workers=2), tmp_path / "out")
    assert step == "validate_data"
    assert "train.batch_size=500" in message and "train.workers=2" in message
    per_worker = int(message.split("larger than the ")[1].split()[0])
    assert 300 < per_worker < 500 and f"at most {per_worker}" in message
    assert not (tmp_path / "out" / "snapshot" / "train.parquet").exists()  # nothing downstream can start


def test_data_max_train_rows_counts_and_a_fitting_batch_passes(tmp_path):
    data = write_clean(tmp_path / "data")
    with pytest.raises(DataValidationError, match=r"train\.batch_size=64 .* \(100 train rows over train\.workers=2\)") as info:
        validate_data(str(data), Config.from_dict({**config_with(batch_size=64).to_dict(),
                                                   "data": {"key": KEY, "max_train_rows": 100}}),
                      snapshot_dir=str(tmp_path / "s1"), data_docs_path="", report_path="", tracking_uri="",
                      mlflow_run_id="")
    assert isinstance(info.value, UserError)  # exit 2, user_error: the watcher does not retry it
    result = validate_data(str(data), config_with(batch_size=50, workers=2), snapshot_dir=str(tmp_path / "s2"),
                           data_docs_path="", report_path="", tracking_uri="", mlflow_run_id="")
    assert result.rows["train"] // 2 >= 50
