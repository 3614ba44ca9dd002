"""The cache key's data fingerprint is the content's (issue 46): a same-size edit in the middle of a file, with
its tail and mtime kept, is new data; unchanged files are not read again (their hashes are cached)."""

from __future__ import annotations

import shutil

import pytest

from ctpipe.components.lib.data.content_fingerprint import (
    HASH_CACHE_ENV,
    check_same_data,
    content_fingerprint,
    hash_files,
    run_cache_path,
)
from ctpipe.components.lib.data.demo import generate_day, write_demo_data
from ctpipe.components.lib.data.files import fingerprint_files, list_data_files
from ctpipe.components.lib.errors import DataChangedError
from ctpipe.testing.data_edits import edit_csv_keeping_size, shuffle_first_half, write_plain_parquet


def _plain_partitions(root, days=2, rows=4000):
    for day in range(days):
        write_plain_parquet(generate_day(day, rows, 1, False, key_offset=day * rows), root / f"date=2026-01-0{day + 1}" / "part-0.parquet")


def test_labels_shuffled_in_the_first_half_of_every_partition_change_the_fingerprint(tmp_path):
    # Before: prepare_run keyed the cache on the listing, the sizes and each file's last 64 KiB, which this edit
    # keeps (a permutation keeps a Parquet footer's statistics), so KFP served validate..select from the cache.
    data, cache = tmp_path / "data", tmp_path / "cache.json"
    _plain_partitions(data)
    before = content_fingerprint(str(data), cache)
    for part in sorted(data.glob("date=*/part-0.parquet")):
        shuffle_first_half(part, "label")
    after = content_fingerprint(str(data), cache)
    assert after != before
    # The same value validation computes and the registered version records.
    assert after == fingerprint_files(list_data_files(str(data)))


def test_a_same_size_csv_edit_before_the_tail_is_new_data(tmp_path):
    part = tmp_path / "data" / "d" / "part-0.csv"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x,label\n" + b"1,0\n" * 40_000)
    before = content_fingerprint(str(tmp_path / "data"), tmp_path / "cache.json")
    edit_csv_keeping_size(part, b"1,0\n1,0", b"1,1\n2,0")
    assert content_fingerprint(str(tmp_path / "data"), tmp_path / "cache.json") != before


def test_unchanged_files_are_not_read_again_and_a_copy_elsewhere_has_the_same_fingerprint(tmp_path):
    write_demo_data(tmp_path / "a", days=3, rows_per_day=50, seed=1)
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    cache = tmp_path / "cache.json"
    files, hashed = hash_files(str(tmp_path / "a"), cache)
    assert hashed == len(files) == 3
    assert hash_files(str(tmp_path / "a"), cache)[1] == 0  # nothing new: listing and stat only
    assert content_fingerprint(str(tmp_path / "b")) == content_fingerprint(str(tmp_path / "a"), cache)
    (tmp_path / "a" / "_temporary").mkdir()  # Spark's output in progress is not data
    (tmp_path / "a" / "_temporary" / "part-9.csv").write_text("x\n1\n")
    assert hash_files(str(tmp_path / "a"), cache)[1] == 0


def test_a_step_finds_the_hash_cache_the_runner_names_and_else_none(tmp_path, monkeypatch):
    monkeypatch.delenv(HASH_CACHE_ENV, raising=False)
    assert run_cache_path("/data", None) is None
    assert run_cache_path("/data", str(tmp_path / "not-mounted")) is None
    assert run_cache_path("/data", str(tmp_path)).parent == tmp_path / ".ctpipe-hash-cache"
    monkeypatch.setenv(HASH_CACHE_ENV, str(tmp_path / "home-cache"))
    assert run_cache_path("/data", str(tmp_path)).parent == tmp_path / "home-cache"
    assert run_cache_path("/data", None) != run_cache_path("/other", None)


def test_data_that_is_not_the_version_expected_is_refused_and_no_expectation_checks_nothing():
    check_same_data("/d", "", "b" * 64, when="x")
    check_same_data("/d", "a" * 64, "a" * 64, when="x")
    with pytest.raises(DataChangedError, match=r"not the version this run was started for: expected fingerprint "
                                               r"aaaaaaaaaaaa, found bbbbbbbbbbbb"):
        check_same_data("/d", "a" * 64, "b" * 64, when="this run was started for")
