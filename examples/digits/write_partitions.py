"""Write scikit-learn's 8x8 digits (no download) as dated Parquet partitions: the example task's data.

    python examples/digits/write_partitions.py /tmp/digits --days 3

Each row is one image: ``id`` (the split key), ``image`` (64 uint8 pixel values 0..16 as raw bytes,
row-major 8x8) and ``label`` (the digit). Rows are spread over ``--days`` partitions
``date=YYYY-MM-DD/part-0.parquet``; ``--first-day`` shifts the dates, so a later call with more days
adds new partitions (new data for ``ctpipe watch``). ``--invert`` writes the images' negatives (drift).
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd


def digits_frame(*, invert: bool = False) -> pd.DataFrame:
    """Every digit image as a row (id, image bytes, label), in a fixed shuffled order."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.reshape(len(digits.images), 64).astype(np.uint8)
    if invert:
        pixels = (16 - pixels).astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(pixels))
    return pd.DataFrame({
        "id": [f"digit-{i:05d}" for i in order],
        "image": [pixels[i].tobytes() for i in order],
        "label": digits.target[order].astype(np.int64),
    })


def write_partitions(out: str | Path, *, days: int = 3, first_day: int = 0, rows: int | None = None,
                     invert: bool = False, start: str = "2026-01-01") -> list[Path]:
    """Write the rows (the first ``rows`` of them, or all) as ``days`` dated partitions under ``out``."""
    frame = digits_frame(invert=invert)
    if rows is not None:
        frame = frame.head(rows)
    day0 = dt.date.fromisoformat(start)
    written = []
    for day, part in enumerate(np.array_split(np.arange(len(frame)), days)):
        if day < first_day:
            continue
        folder = Path(out) / f"date={(day0 + dt.timedelta(days=day)).isoformat()}"
        folder.mkdir(parents=True, exist_ok=True)
        frame.iloc[part].reset_index(drop=True).to_parquet(folder / "part-0.parquet", index=False)
        written.append(folder)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--first-day", type=int, default=0, help="skip the partitions before this day")
    parser.add_argument("--rows", type=int, default=None, help="only the first ROWS images")
    parser.add_argument("--invert", action="store_true", help="write negatives (a drifted data set)")
    args = parser.parse_args(argv)
    for folder in write_partitions(args.out, days=args.days, first_day=args.first_day, rows=args.rows,
                                   invert=args.invert):
        print(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
