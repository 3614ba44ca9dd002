"""Reading a data root as record batches: one bounded DataFrame at a time, with its partition.

Parquet files are read a record batch at a time (``pyarrow.parquet.ParquetFile.iter_batches``), CSV files
in chunks, so no step needs the whole data root in memory. ``count_rows`` reads only Parquet footers.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ctpipe.components.lib.data.files import DATA_SUFFIXES, DataFile, _fs_and_root, partition_of
from ctpipe.components.lib.data.splits import PARTITION_COLUMN
from ctpipe.components.lib.errors import DataValidationError

BATCH_ROWS = 65_536
# pandas before 3.1 parses CSV floats with a fast parser that is not round-trip exact (0.09274547552338075
# came back 0.0927454755233807; 39 % of random doubles changed by an ulp): the data, its statistics and the
# stable split of every row holding such a value then differ from the Parquet copy of the same rows.
# pandas 3.1 round-trips by default and deprecates the option.
_CSV_OPTIONS = {"float_precision": "round_trip"} if tuple(map(int, pd.__version__.split(".")[:2])) < (3, 1) else {}


def read_csv(handle, **options) -> pd.DataFrame | Iterator[pd.DataFrame]:
    """``pd.read_csv`` with floats read back exactly as written, on every supported pandas."""
    return pd.read_csv(handle, **_CSV_OPTIONS, **options)


def _kind(f: DataFile, fmt: str) -> str:
    return fmt if fmt != "auto" else DATA_SUFFIXES["." + f.path.rsplit(".", 1)[-1].lower()]


def _unreadable(f: DataFile, data_uri: str, kind: str, err: Exception) -> DataValidationError:
    return DataValidationError(
        f"data file '{f.path}' under '{data_uri}' cannot be read as {kind}: {type(err).__name__}: "
        f"{str(err)[:200]}. Replace or remove the file and run again."
    )


def _full_path(data_uri: str, f: DataFile) -> tuple[object, str]:
    fs, root = _fs_and_root(data_uri)
    base = root if fs.isdir(root) else root.rsplit("/", 1)[0]
    return fs, (f"{base}/{f.path}" if base else f.path)


def count_rows(data_uri: str, files: list[DataFile], fmt: str = "auto") -> int | None:
    """Rows in all files from their Parquet footers; None when a file is CSV (counting means reading it)."""
    total = 0
    for f in files:
        kind = _kind(f, fmt)
        if kind != "parquet":
            return None
        fs, full = _full_path(data_uri, f)
        try:
            with fs.open(full, "rb") as handle:
                total += pq.ParquetFile(handle).metadata.num_rows
        except Exception as err:  # a damaged footer: named here, as read_data names it
            raise _unreadable(f, data_uri, kind, err) from None
    return total


def iter_batches(data_uri: str, files: list[DataFile], fmt: str = "auto", *,
                 batch_rows: int = BATCH_ROWS) -> Iterator[pd.DataFrame]:
    """Every file's rows as DataFrames of at most ``batch_rows`` rows, with a ``__partition`` column, in file order.

    Consecutive small Parquet files of one partition with the same Arrow schema are read into one batch (a
    partition written as 50,000 files of 20 rows is then ~16 batches, not 50,000: each batch costs
    milliseconds of fixed work in every pass); a file of another schema starts a new batch, so a batch's
    columns and dtypes are always those of its files."""
    pending: list = []  # Arrow tables of small files waiting to be one batch
    pending_rows, pending_key = 0, None

    def flush() -> Iterator[pd.DataFrame]:
        nonlocal pending, pending_rows, pending_key
        if pending:
            frame = (pending[0] if len(pending) == 1 else pa.concat_tables(pending)).to_pandas()
            frame[PARTITION_COLUMN] = pending_key[0]
            yield frame
        pending, pending_rows, pending_key = [], 0, None

    for f in files:
        kind = _kind(f, fmt)
        fs, full = _full_path(data_uri, f)
        try:
            with fs.open(full, "rb") as handle:
                if kind == "parquet":
                    source = pq.ParquetFile(handle)
                    rows = source.metadata.num_rows
                    if rows == 0:  # no batch, as pyarrow's own reader gives none
                        continue
                    if rows < batch_rows:  # small: join the pending batch when it fits and matches
                        table = source.read()
                        key = (partition_of(f.path), table.schema)
                        if pending and (key != pending_key or pending_rows + rows > batch_rows):
                            yield from flush()
                        pending.append(table)
                        pending_rows, pending_key = pending_rows + rows, key
                        continue
                    yield from flush()
                    chunks = (b.to_pandas() for b in source.iter_batches(batch_size=batch_rows))
                else:
                    yield from flush()
                    chunks = read_csv(handle, chunksize=batch_rows)
                for frame in chunks:
                    frame[PARTITION_COLUMN] = partition_of(f.path)
                    yield frame
        except DataValidationError:
            raise
        except Exception as err:  # pyarrow/pandas raise many types for a damaged file
            raise _unreadable(f, data_uri, kind, err) from None
    yield from flush()
