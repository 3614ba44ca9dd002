"""Pass 1 in parts: the parts of single files, merged in file order, give what one pass over all files gives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.batches import iter_batches
from ctpipe.components.lib.data.files import list_data_files, partition_of
from ctpipe.components.lib.data.scan import sample_budget, scan
from ctpipe.components.lib.data.scan_parts import ScanPart
from ctpipe.components.lib.data.splits import SplitSettings


def _data(root) -> None:
    rng = np.random.default_rng(0)
    for day in range(1, 4):
        part = root / f"date=2026-01-0{day}"
        part.mkdir(parents=True)
        for f in range(2):  # two files a partition: a partition's rows come from two parts
            n = 700 + 100 * f
            frame = pd.DataFrame({"id": np.arange(day * 10_000 + f * 1000, day * 10_000 + f * 1000 + n),
                                  "x": rng.normal(size=n), "c": rng.choice(["a", "b"], n),
                                  "label": rng.choice(["y", "n"], n, p=[0.1, 0.9])})
            if day == 2 and f == 1:
                frame["extra"] = rng.normal(size=n)  # a column only one file has
                frame.loc[:5, "x"] = np.nan
            frame.to_parquet(part / f"part-{f}.parquet")


def test_merged_file_parts_equal_one_pass(tmp_path):
    _data(tmp_path)
    files = list_data_files(str(tmp_path))
    settings = SplitSettings(key="id", salt="s", val_fraction=0.1, test_fraction=0.1)
    kwargs = dict(label="label", key="id", features=[], settings=settings)
    whole = scan(str(tmp_path), files, "auto", sample_rows=3000, **kwargs)
    partitions = sorted({partition_of(f.path) for f in files})
    budget = sample_budget(3000, len(partitions))
    merged, position, in_part = None, 0, {}
    for f in files:
        part = ScanPart(budget=budget, keep_rows=False, position=position, in_part=dict(in_part), **kwargs)
        for batch in iter_batches(str(tmp_path), [f], "auto", batch_rows=300):
            part.add(batch)
        position += part.seen
        in_part[partition_of(f.path)] = in_part.get(partition_of(f.path), 0) + part.seen
        merged = part if merged is None else merged.merge(part)
    parted = merged.to_scan(partitions)
    assert parted.rows == whole.rows and parted.present == whole.present and parted.label_nulls == whole.label_nulls
    assert parted.split_rows() == whole.split_rows()
    assert parted.columns == whole.columns and parted.train_columns == whole.train_columns
    pd.testing.assert_frame_equal(parted.sample.reset_index(drop=True), whole.sample.reset_index(drop=True))
    assert np.array_equal(parted.weights, whole.weights)
