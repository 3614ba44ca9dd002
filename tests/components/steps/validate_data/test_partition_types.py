"""Data the snapshot cannot hold is a named validation error (issue 46), checked before anything is written:
a column of another type in one partition, a CSV header naming a column twice, a value pyarrow cannot convert."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import DataValidationError, UserError
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.corpus import KEY, write_clean


def run(data: Path, out: Path, **data_settings):
    cfg = Config.from_dict({"data": {"key": KEY, **data_settings}})
    return validate_data(str(data), cfg, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")


def _numeric_column(frame: pd.DataFrame) -> str:
    return next(c for c in frame.columns if c != KEY and pd.api.types.is_integer_dtype(frame[c]))


def test_a_column_numeric_in_two_partitions_and_text_in_a_third_is_refused_naming_file_column_and_types(tmp_path):
    # Before: validation passed, then writing the snapshot failed with pyarrow's raw ArrowInvalid (exit 1,
    # user_error false: the watcher retried it).
    data = write_clean(tmp_path / "data")
    parts = sorted(data.glob("date=*/part-0.parquet"))
    assert len(parts) >= 3
    frame = pd.read_parquet(parts[-1])
    column = _numeric_column(frame)
    frame[column] = [f"${v}.69" for v in frame[column]]
    frame.to_parquet(parts[-1], index=False)
    with pytest.raises(DataValidationError) as raised:
        run(data, tmp_path / "out")
    message = str(raised.value)
    newest = parts[-1].relative_to(data).as_posix()
    assert f"column '{column}'" in message and "schema drift across partitions" in message
    assert f"text in {newest}" in message and "number in " in message and ".69'" in message
    assert not (tmp_path / "out" / "snapshot" / "train.parquet").exists()  # checked before anything is written
    assert "schema drift across partitions" in (tmp_path / "out" / "report.md").read_text()


def test_a_csv_header_naming_a_column_twice_is_refused_not_read_as_a_renamed_copy(tmp_path):
    # Before: pandas read `region,…,region` as region and region.1, validation passed and a version was registered.
    data = write_clean(tmp_path / "parquet")
    csv_root = tmp_path / "csv"
    for part in sorted(data.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        out = csv_root / part.parent.name / "part-0.csv"
        out.parent.mkdir(parents=True)
        text = frame.to_csv(index=False)
        header, _, rows = text.partition("\n")
        names = header.split(",")
        names[-2] = names[1]  # another column's values under a repeated name
        out.write_text(",".join(names) + "\n" + rows)
    with pytest.raises(DataValidationError, match=rf"data file 'date=[^']+/part-0.csv' names column '{names[1]}' 2 times"):
        run(csv_root, tmp_path / "out")
    assert not (tmp_path / "out" / "snapshot" / "train.parquet").exists()


def test_a_value_the_snapshot_writer_cannot_convert_is_a_named_user_error():
    from ctpipe.components.steps.validate_data.partition_types import conversion_errors, conversion_finding

    with pytest.raises(conversion_errors()) as raised:  # what pyarrow raises for a column of str and int
        pa.Table.from_pandas(pd.DataFrame({"spend": pd.Series(["$2.69", 3], dtype=object)}))
    finding = conversion_finding(raised.value)
    assert finding.is_error and finding.column == "spend"
    assert "column 'spend' holds values of more than one type" in finding.message
    assert "got a 'int' object" in finding.message
    assert issubclass(DataValidationError, UserError)
