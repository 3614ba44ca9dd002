"""Edits of a data file that a cheap fingerprint cannot see: the same size, the same tail, the mtime put back.

    write_plain_parquet(frame, path)                  # uncompressed, plain-encoded, two row groups (> 64 KiB)
    shuffle_first_half(path, "label")                 # other labels in rows 0..n/2, nothing else moves

What an operator did in issue 46: the labels of the first half of every Parquet partition shuffled, each
file's size, its last 64 KiB (the footer: schema, row groups, min/max statistics) and its mtime kept. A
permutation keeps a plain-encoded column's bytes per page and every statistic, so only the bytes of the first
row group's data pages differ. The tests of the cache key and ``benchmarks/soak.py`` use it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

TAIL_BYTES = 64 * 1024  # what the old quick fingerprint read of each file


def write_plain_parquet(frame: pd.DataFrame, path: str | Path) -> Path:
    """``frame`` as Parquet whose bytes a permutation within a row group does not resize: no compression, no
    dictionary, two row groups (the first half of the rows, then the rest)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table, path, compression="none", use_dictionary=False, row_group_size=max(len(frame) // 2, 1),
                   write_page_index=False)
    return path


def shuffle_first_half(path: str | Path, column: str, *, seed: int = 0) -> None:
    """Permute ``column`` within the first row group of a ``write_plain_parquet`` file, keeping its size, its
    last ``TAIL_BYTES`` and its mtime (AssertionError if they could not be kept: the edit would be visible)."""
    path = Path(path)
    before, raw = path.stat(), path.read_bytes()
    frame = pd.read_parquet(path)
    half = len(frame) // 2
    values = frame[column].to_numpy().copy()
    first = values[:half]
    order = np.random.default_rng(seed).permutation(half)
    if (first[order] == first).all():
        order = np.roll(np.arange(half), 1)
    values[:half] = first[order]
    frame[column] = values
    write_plain_parquet(frame, path)
    after = path.read_bytes()
    assert len(after) == len(raw), "the shuffle changed the file's size"
    assert after[-TAIL_BYTES:] == raw[-TAIL_BYTES:], "the shuffle changed the file's last 64 KiB"
    assert after != raw, "the shuffle changed nothing"
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def edit_csv_keeping_size(path: str | Path, old: bytes, new: bytes) -> None:
    """Replace the first ``old`` in a CSV file by ``new`` of the same length, the mtime put back."""
    assert len(old) == len(new), "a same-size edit needs a replacement of the same length"
    path = Path(path)
    before, raw = path.stat(), path.read_bytes()
    at = raw.index(old)
    assert at < len(raw) - TAIL_BYTES, "the edit must fall before the file's last 64 KiB"
    path.write_bytes(raw[:at] + new + raw[at + len(old):])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
