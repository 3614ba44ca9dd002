"""Per-partition sketches: a new partition is the only one read, the merge equals a sketch of all, pruning."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.data.files import list_data_files
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.sketches.partition_sketches import train_sketch
from ctpipe.components.lib.sketches.sketch_store import STALE_DAYS, SketchStore

SCHEMA = Schema(label="label", key="id", numeric=["x"], categorical=["c"], classes=["0", "1"])
SETTINGS = SplitSettings(key="id", salt="s", val_fraction=0.1, test_fraction=0.1)


def _write(root, day: int, rows: int = 400) -> None:
    rng = np.random.default_rng(day)
    part = root / f"date=2026-01-{day:02d}"
    part.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": np.arange(day * 10_000, day * 10_000 + rows), "x": rng.normal(day, 1, rows),
                  "c": rng.choice(["a", "b"], rows), "label": rng.integers(0, 2, rows)}).to_parquet(part / "part-0.parquet")


def test_only_a_new_partition_is_read_and_the_merge_equals_sketching_everything(tmp_path):
    data, store = tmp_path / "data", str(tmp_path / "store")
    for day in (1, 2, 3):
        _write(data, day)
    first = train_sketch(str(data), list_data_files(str(data)), "auto", SCHEMA, SETTINGS, store_uri=store)
    assert first.computed == ["date=2026-01-01", "date=2026-01-02", "date=2026-01-03"] and first.reused == []
    _write(data, 4)
    files = list_data_files(str(data))
    second = train_sketch(str(data), files, "auto", SCHEMA, SETTINGS, store_uri=store)
    assert second.computed == ["date=2026-01-04"] and len(second.reused) == 3
    assert second.bytes_read == next(f.size for f in files if f.path.startswith("date=2026-01-04"))
    fresh = train_sketch(str(data), files, "auto", SCHEMA, SETTINGS)  # no store: everything computed
    assert second.sketch.summary() == fresh.sketch.summary()
    x = second.sketch.numeric["x"]
    assert x.sample.first(5000).tolist() == fresh.sketch.numeric["x"].sample.first(5000).tolist()
    # Only train rows are sketched: about 80 % of the 1,600 rows.
    assert 1200 < second.sketch.rows < 1400 and x.count == second.sketch.rows


def test_a_changed_partition_is_sketched_again_and_a_removed_one_is_pruned(tmp_path):
    data, store = tmp_path / "data", str(tmp_path / "store")
    for day in (1, 2):
        _write(data, day)
    train_sketch(str(data), list_data_files(str(data)), "auto", SCHEMA, SETTINGS, store_uri=store)
    _write(data, 2, rows=500)  # re-delivered with more rows
    shutil.rmtree(data / "date=2026-01-01")
    again = train_sketch(str(data), list_data_files(str(data)), "auto", SCHEMA, SETTINGS, store_uri=store)
    assert again.computed == ["date=2026-01-02"] and again.reused == []
    stored = [p for p in (tmp_path / "store").rglob("*.json")]
    assert len(stored) == 1  # the old day 2 and the removed day 1 are gone


def test_a_window_that_cuts_a_partition_gets_a_sketch_of_its_kept_rows(tmp_path):
    data = tmp_path / "data"
    _write(data, 1)
    files = list_data_files(str(data))
    whole = train_sketch(str(data), files, "auto", SCHEMA, SETTINGS).sketch
    cut = train_sketch(str(data), files, "auto", SCHEMA, SETTINGS, keep={"date=2026-01-01": 100}).sketch
    assert cut.rows == 100 and whole.rows > 300
    none = train_sketch(str(data), files, "auto", SCHEMA, SETTINGS, keep={"date=2026-01-01": 0}).sketch
    assert none.rows == 0


def test_stale_scopes_are_pruned_and_a_damaged_sketch_is_computed_again(tmp_path):
    data, store = tmp_path / "data", tmp_path / "store"
    _write(data, 1)
    files = list_data_files(str(data))
    train_sketch(str(data), files, "auto", SCHEMA, SETTINGS, store_uri=str(store))
    other = SplitSettings(key="id", salt="other", val_fraction=0.1, test_fraction=0.1)
    train_sketch(str(data), files, "auto", SCHEMA, other, store_uri=str(store))
    assert len([p for p in store.iterdir() if p.is_dir()]) == 2
    for path in store.rglob("*.json"):
        path.write_text("{not json")
    again = train_sketch(str(data), files, "auto", SCHEMA, other, store_uri=str(store))
    assert again.computed == ["date=2026-01-01"]
    scopes = sorted(p.name for p in store.iterdir())
    later = SketchStore(str(store), scopes[0]).prune(set(), now=__import__("time").time() + (STALE_DAYS + 1) * 86400)
    assert any(p.endswith(scopes[1]) for p in later) and len([p for p in store.iterdir()]) == 1


@pytest.mark.parametrize("rows", [0])
def test_an_empty_partition_gives_an_empty_sketch(tmp_path, rows):
    data = tmp_path / "data"
    _write(data, 1, rows=rows)
    result = train_sketch(str(data), list_data_files(str(data)), "auto", SCHEMA, SETTINGS)
    assert result.sketch.rows == 0 and result.sketch.numeric["x"].quantiles(np.array([0.5])) == []
