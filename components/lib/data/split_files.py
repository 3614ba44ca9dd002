"""The split files of a snapshot: Parquet written in bounded row groups, read back in record batches.

A snapshot's ``train.parquet`` / ``val.parquet`` / ``test.parquet`` are written as they arrive, a batch
at a time, in row groups of at most ``ROW_GROUP_ROWS`` rows, so a later step streams them (one row
group in memory at a time) instead of holding a whole split, and a training rank can read row groups
by index.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

ROW_GROUP_ROWS = 65_536


class SplitWriter:
    """Appends the rows of one split to its Parquet file, in row groups of at most ``row_group_rows``."""

    def __init__(self, path: str | Path, *, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.path, self.row_group_rows = Path(path), row_group_rows
        self.rows = 0
        self._writer: pq.ParquetWriter | None = None

    def write(self, frame: pd.DataFrame) -> None:
        table = pa.Table.from_pandas(frame, preserve_index=False)
        if self._writer is None:
            self._writer = pq.ParquetWriter(self.path, table.schema)
        elif table.schema != self._writer.schema:
            table = table.cast(self._writer.schema)  # a later batch's nullability/metadata differs
        self._writer.write_table(table, row_group_size=self.row_group_rows)
        self.rows += len(frame)

    def close(self, empty_like: pd.DataFrame) -> None:
        """Finish the file; a split that got no rows is written empty, with ``empty_like``'s columns."""
        if self._writer is None:
            empty_like.iloc[:0].to_parquet(self.path, index=False)
        else:
            self._writer.close()


class SplitGroups:
    """The row groups of a split, numbered from 0 across its files: ``train.parquet`` is one file (the local engine
    writes it) or a folder of part files (the Spark engine's tasks write one each, ``part-*.parquet``, in name
    order; names starting with '.' or '_' are not data, as for Spark and pyarrow)."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        self.files = [path] if not path.is_dir() else sorted(
            p for p in path.glob("*.parquet") if not p.name.startswith((".", "_")))
        if not self.files:
            raise FileNotFoundError(f"split '{path}' has no Parquet part files")
        self._handles: dict[int, pq.ParquetFile] = {}
        self.where: list[tuple[int, int]] = []  # (file, row group in it) of each global row group
        self.sizes: list[int] = []
        for f in range(len(self.files)):
            meta = self._handle(f).metadata
            for g in range(meta.num_row_groups):
                self.where.append((f, g))
                self.sizes.append(meta.row_group(g).num_rows)

    def _handle(self, f: int) -> pq.ParquetFile:
        if f not in self._handles:
            self._handles = {f: pq.ParquetFile(self.files[f])}  # one open file at a time
        return self._handles[f]

    @property
    def rows(self) -> int:
        return int(sum(self.sizes))

    def read(self, index: int, columns: list[str] | None = None) -> pd.DataFrame:
        f, g = self.where[index]
        return self._handle(f).read_row_group(g, columns=columns).to_pandas()

    def empty(self) -> pd.DataFrame:
        return self._handle(0).schema_arrow.empty_table().to_pandas()


def split_rows(path: str | Path) -> int:
    """Rows in a split, from its footers (nothing else is read)."""
    return SplitGroups(path).rows


def read_column(path: str | Path, column: str) -> pd.Series:
    """One column of a split (only that column is read)."""
    return pq.read_table(path, columns=[column]).to_pandas()[column]


def take_rows(path: str | Path, positions: np.ndarray) -> pd.DataFrame:
    """The rows at ``positions`` (from 0, any order) of a split, in that order; only their row groups are read."""
    groups = SplitGroups(path)
    starts = np.concatenate([[0], np.cumsum(groups.sizes)])[:-1].astype(np.int64)
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) == 0:
        return groups.empty()
    group = np.searchsorted(starts, positions, side="right") - 1
    pieces, order = [], []
    for g in np.unique(group):
        mine = np.flatnonzero(group == g)
        pieces.append(groups.read(int(g)).iloc[positions[mine] - starts[g]])
        order.append(mine)
    frame = pd.concat(pieces, ignore_index=True)
    return frame.iloc[np.argsort(np.concatenate(order), kind="stable")].reset_index(drop=True)


def iter_split_batches(path: str | Path, *, columns: list[str] | None = None,
                       row_groups: list[int] | None = None) -> Iterator[pd.DataFrame]:
    """The split's rows as DataFrames, one row group at a time (all of them, or ``row_groups`` in that order)."""
    groups = SplitGroups(path)
    for index in range(len(groups.sizes)) if row_groups is None else row_groups:
        yield groups.read(index, columns=columns)
