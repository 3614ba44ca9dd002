"""Shapes one pod choked on: a partition of thousands of small files, a table of thousands of columns.

Before, a partition of 5,000 files of 10 rows took 391 s to stream (every file was its own batch, each costing
milliseconds in every pass) and 10,000 columns gave no output in 600 s. Now small files of one schema share
batches on both engines, and data wider than ``validation.max_columns`` stops before any row is read. CI runs
them small; ``benchmarks/scale.py`` has the full shapes' figures in docs/performance.md.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.validate import validate_data


@pytest.fixture(params=["local", "spark"])
def engine(request) -> str:
    if request.param == "spark":
        request.getfixturevalue("spark")  # the shared session (skipped without pyspark, outside CI)
    return request.param


def _run(data, tmp_path, engine: str, **validation):
    cfg = Config.from_dict({"data": {"key": "id"}, "validation": {"engine": engine, **validation}})
    return validate_data(str(data), cfg, snapshot_dir=str(tmp_path / "snap"), data_docs_path="",
                         report_path=str(tmp_path / "report.md"), tracking_uri="", mlflow_run_id="")


def test_a_partition_of_many_small_files_is_validated_in_shared_batches(tmp_path, engine):
    rng = np.random.default_rng(0)
    for day in (1, 2):
        part = tmp_path / "data" / f"date=2026-01-0{day}"
        part.mkdir(parents=True)
        for i in range(600 if day == 1 else 3):
            start = day * 100_000 + i * 5
            pq.write_table(pa.table({"id": np.arange(start, start + 5), "x": rng.normal(size=5),
                                     "c": rng.choice(["a", "b"], 5), "label": rng.choice(["y", "n"], 5)}),
                           part / f"part-{i:05d}.parquet")
    result = _run(tmp_path / "data", tmp_path, engine)
    assert sum(result.rows.values()) == 603 * 5
    assert result.rows["train"] > 2_000


def test_a_table_wider_than_the_limit_stops_before_reading_a_row(tmp_path, engine):
    data = tmp_path / "data" / "date=2026-01-01"
    data.mkdir(parents=True)
    columns = {f"f{i}": np.arange(20.0) for i in range(2_100)}
    pq.write_table(pa.table({"id": np.arange(20), "label": ["y", "n"] * 10, **columns}), data / "part-0.parquet")
    with pytest.raises(DataValidationError, match=r"2102 columns .* more than validation.max_columns=2000"):
        _run(tmp_path / "data", tmp_path, engine)
    assert "data.features" in (tmp_path / "report.md").read_text()
