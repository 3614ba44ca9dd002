"""The streaming pass: what it judges exactly over every row, across record batches and partitions."""

from __future__ import annotations

import numpy as np
import pytest

from ctpipe.components.lib.data.scan import MIN_PER_PARTITION, scan
from ctpipe.components.lib.data.simulate import mixed_type_rows, write_partition
from ctpipe.components.lib.data.snapshot import fingerprint_files, list_data_files
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.errors import DataValidationError

SETTINGS = SplitSettings(key="customer_id", salt="s", val_fraction=0.1, test_fraction=0.1)


def _scan(root):
    return scan(str(root), list_data_files(str(root)), "auto", label="label", key="customer_id", features=[],
                settings=SETTINGS, sample_rows=1000)


def _two_days(root, other_label: bool):
    rng = np.random.default_rng(0)
    old, new = mixed_type_rows(rng, 3000, 0), mixed_type_rows(rng, 3000, 3000)
    new.loc[5, "customer_id"] = 17  # the key of an old row, delivered again the next day
    flipped = {"a": "b", "b": "a"}[old.loc[17, "label"]]
    new.loc[5, "label"] = flipped if other_label else old.loc[17, "label"]
    write_partition(root, "2026-01-01", old)
    write_partition(root, "2026-01-02", new)


def test_a_key_repeated_with_another_label_in_another_batch_is_a_data_error_naming_its_rows(tmp_path):
    _two_days(tmp_path, other_label=True)
    with pytest.raises(DataValidationError) as caught:  # before: each batch was judged alone, and this passed
        _scan(tmp_path)
    message = str(caught.value)
    assert "the key column 'customer_id' (data.key) repeats 1 key(s) with different labels ('label')" in message
    assert "partition date=2026-01-01 rows 17, partition date=2026-01-02 rows 5" in message


def test_a_key_delivered_again_with_the_same_label_is_one_example(tmp_path):
    _two_days(tmp_path, other_label=False)
    assert _scan(tmp_path).total == 6000


def test_the_sample_keeps_a_numeric_column_numeric_when_one_file_of_a_partition_has_it_all_null(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ctpipe.components.lib.data.snapshot import infer_schema

    rng = np.random.default_rng(1)
    write_partition(tmp_path, "2026-01-01", mixed_type_rows(rng, 500, 0))
    # A second file of the day whose writer saw only nulls in 'spend': Arrow's null type, read back as object.
    late = mixed_type_rows(rng, 50, 10_000).assign(spend=None)
    pq.write_table(pa.Table.from_pandas(late, preserve_index=False), tmp_path / "date=2026-01-01" / "part-1.parquet")
    sample = _scan(tmp_path).sample
    # Before: the partition's sample was joined with pd.concat (float64 + object -> object), and streamed
    # validation reported "column 'spend' should be numeric ... but arrives as text".
    assert str(sample["spend"].dtype) == "float64"
    assert "spend" in infer_schema(sample, label="label", key="customer_id", features=[], categorical=[]).numeric


def test_a_null_key_in_a_later_record_batch_is_named_by_its_row_in_the_partition(tmp_path):
    rows = mixed_type_rows(np.random.default_rng(2), 70_000, 0).astype({"customer_id": "float64"})
    rows.loc[68_000, "customer_id"] = np.nan  # in the file's second record batch (65,536 rows a batch)
    write_partition(tmp_path, "2026-01-01", rows)
    with pytest.raises(DataValidationError) as caught:
        _scan(tmp_path)
    # Before: "rows 2464", the row's number within its record batch.
    assert "is null in 1 row(s): partition date=2026-01-01 rows 68000 " in str(caught.value)


def _nested(root):
    """Partition date=2026-01-01 holds files on both sides of its subfolder (its own partition) in path order."""
    rng = np.random.default_rng(3)
    day, sub = root / "date=2026-01-01", root / "date=2026-01-01" / "sub"
    sub.mkdir(parents=True)
    mixed_type_rows(rng, 1500, 0).to_parquet(day / "part-0.parquet", index=False)
    mixed_type_rows(rng, 300, 1500).to_parquet(sub / "part-0.parquet", index=False)
    mixed_type_rows(rng, 1500, 1800).to_parquet(day / "tail.parquet", index=False)
    write_partition(root, "2026-01-02", mixed_type_rows(rng, 400, 3300))


def test_the_listing_keeps_each_partition_together_when_a_partition_folder_has_subfolders(tmp_path):
    _nested(tmp_path)
    files = list_data_files(str(tmp_path))
    # Before: path order put date=2026-01-01/sub/part-0 between the two files of date=2026-01-01.
    assert [f.path for f in files] == ["date=2026-01-01/part-0.parquet", "date=2026-01-01/tail.parquet",
                                       "date=2026-01-01/sub/part-0.parquet", "date=2026-01-02/part-0.parquet"]
    assert fingerprint_files(files) == fingerprint_files(sorted(files, key=lambda f: f.path))


def test_a_partition_split_by_a_subfolder_is_sampled_once_within_its_budget(tmp_path):
    _nested(tmp_path)
    result = _scan(tmp_path)
    assert result.rows == {"date=2026-01-01": 3000, "date=2026-01-01/sub": 300, "date=2026-01-02": 400}
    # Before: its sample was finished twice (1500 + 1500 rows) past the budget of MIN_PER_PARTITION rows.
    assert result.sample["__partition"].value_counts().to_dict() == {
        "date=2026-01-01": MIN_PER_PARTITION, "date=2026-01-02": 400, "date=2026-01-01/sub": 300}


def test_the_scan_refuses_files_whose_partitions_are_not_grouped(tmp_path):
    _nested(tmp_path)
    files = sorted(list_data_files(str(tmp_path)), key=lambda f: f.path)
    with pytest.raises(ValueError, match="grouped by partition"):
        scan(str(tmp_path), files, "auto", label="label", key="customer_id", features=[], settings=SETTINGS,
             sample_rows=1000)
