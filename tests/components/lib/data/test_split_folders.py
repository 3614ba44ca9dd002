"""A split written as a folder of part files (the Spark engine's) reads by row group as one file does."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.engine.shards import group_sizes
from ctpipe.components.lib.data.split_files import SplitWriter, iter_split_batches, split_rows, take_rows


def test_a_folder_of_parts_reads_like_one_file(tmp_path):
    frame = pd.DataFrame({"x": np.arange(1000.0), "c": [f"v{i % 7}" for i in range(1000)]})
    one = SplitWriter(tmp_path / "one.parquet", row_group_rows=128)
    one.write(frame)
    one.close(frame)
    folder = tmp_path / "train.parquet"
    folder.mkdir()
    for i, (start, stop) in enumerate([(0, 300), (300, 1000)]):
        part = SplitWriter(folder / f"part-{i:06d}.parquet", row_group_rows=128)
        part.write(frame.iloc[start:stop])
        part.close(frame)
    (folder / ".part-000009-inprogress.parquet").write_bytes(b"half written")  # not data: a task still writing
    assert split_rows(folder) == 1000 and sum(group_sizes(folder)) == 1000
    assert group_sizes(folder) == [128, 128, 44] + [128] * 5 + [60]
    pd.testing.assert_frame_equal(pd.concat(list(iter_split_batches(folder)), ignore_index=True), frame)
    positions = np.array([999, 0, 299, 300, 511])
    pd.testing.assert_frame_equal(take_rows(folder, positions), take_rows(tmp_path / "one.parquet", positions))
