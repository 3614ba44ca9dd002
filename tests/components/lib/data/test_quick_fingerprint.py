"""prepare_run's cheap fingerprint: the listing and each file's footer, enough to key KFP's cache on the data."""

from __future__ import annotations

import shutil

import pandas as pd

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.quick_fingerprint import FOOTER_BYTES, quick_fingerprint


def test_unchanged_data_has_the_same_fingerprint_and_a_copy_elsewhere_too(tmp_path):
    write_demo_data(tmp_path / "a", days=2, rows_per_day=50, seed=1)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    assert quick_fingerprint(str(tmp_path / "a")) == quick_fingerprint(str(tmp_path / "a"))
    assert quick_fingerprint(str(tmp_path / "a")) == quick_fingerprint(str(tmp_path / "b"))


def test_a_new_partition_or_a_rewritten_one_changes_it(tmp_path):
    write_demo_data(tmp_path, days=2, rows_per_day=50, seed=1)
    before = quick_fingerprint(str(tmp_path))
    part = sorted(tmp_path.glob("date=*/part-0.parquet"))[0]
    frame = pd.read_parquet(part).iloc[1:]  # one row fewer: the footer's row count changes
    frame.to_parquet(part, index=False)
    rewritten = quick_fingerprint(str(tmp_path))
    assert rewritten != before
    (tmp_path / "date=2099-01-01").mkdir()
    frame.to_parquet(tmp_path / "date=2099-01-01" / "part-0.parquet", index=False)
    assert quick_fingerprint(str(tmp_path)) != rewritten


def test_only_the_footer_is_read_and_files_in_progress_are_left_out(tmp_path):
    big = tmp_path / "d" / "part-0.csv"
    big.parent.mkdir()
    body = b"x,label\n" + b"1,0\n" * (FOOTER_BYTES // 2)
    big.write_bytes(body)
    before = quick_fingerprint(str(tmp_path))
    (tmp_path / "_temporary").mkdir()
    (tmp_path / "_temporary" / "part-9.csv").write_bytes(b"x,label\n2,1\n")
    assert quick_fingerprint(str(tmp_path)) == before  # Spark's output in progress is not data
    # Same size, a changed byte before the footer: not seen (validation's full fingerprint records it).
    big.write_bytes(b"x,label\n2" + body[9:])
    assert quick_fingerprint(str(tmp_path)) == before
    big.write_bytes(body[:-2] + b"1\n")
    assert quick_fingerprint(str(tmp_path)) != before
