"""benchmarks/pipeline.py --rerun: its changed partition is new data under the same URI, as prepare_run sees it."""

from __future__ import annotations

import importlib.util

import pandas as pd

from ctpipe.components.lib.data.content_fingerprint import content_fingerprint
from ctpipe.components.lib.data.demo import write_demo_data
from tests.fixtures.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("pipeline_bench", REPO_ROOT / "benchmarks" / "pipeline.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_the_changed_partition_changes_the_fingerprint_and_loses_one_row(tmp_path):
    write_demo_data(tmp_path, days=3, rows_per_day=40, seed=0)
    before = content_fingerprint(str(tmp_path))
    newest = sorted(tmp_path.glob("date=*/part-0.parquet"))[-1]
    rows = len(pd.read_parquet(newest))
    assert bench.change_one_partition(tmp_path) == newest
    assert len(pd.read_parquet(newest)) == rows - 1
    assert content_fingerprint(str(tmp_path)) != before
    assert sorted(p.name for p in newest.parent.iterdir()) == ["part-0.parquet"]  # no staging file left
