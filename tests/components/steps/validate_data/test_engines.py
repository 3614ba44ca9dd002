"""validation.engine: the setting, the auto choice, and the local engine's streaming of many small files."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.steps.validate_data.engines import MAX_IN_MEMORY_FILES, LocalEngine, chosen_engine
from tests.fixtures.corpus import write_clean


def test_the_engine_setting_names_the_allowed_values():
    assert Config().validation.engine == "local"
    with pytest.raises(ConfigError, match="validation.engine"):
        Config.from_dict({"validation": {"engine": "dask"}})
    with pytest.raises(ConfigError, match="validation.spark_partitions"):
        Config.from_dict({"validation": {"spark_partitions": 0}})


def test_auto_picks_spark_above_its_row_count_from_the_footers(tmp_path):
    data = write_clean(tmp_path / "data")  # 3 x 300 rows
    below = Config.from_dict({"validation": {"engine": "auto", "spark_min_rows": 900}})
    above = Config.from_dict({"validation": {"engine": "auto", "spark_min_rows": 899}})
    assert chosen_engine(str(data), below) == "local" and chosen_engine(str(data), above) == "spark"
    assert chosen_engine(str(data), Config.from_dict({"validation": {"engine": "spark"}})) == "spark"


def test_the_local_engine_streams_many_files_even_when_their_rows_are_few():
    config = Config()
    engine = LocalEngine()
    assert not engine.streams(10_000, config, files=MAX_IN_MEMORY_FILES)
    assert engine.streams(10_000, config, files=MAX_IN_MEMORY_FILES + 1)
    assert engine.streams(config.validation.in_memory_rows + 1, config, files=1)
    assert not engine.streams(None, config, files=5_000)  # CSV: no footer to count, read whole
