"""Write scikit-learn's 8x8 digits (no download) as dated Parquet partitions, a row an image: ``id`` (the
split key), ``image`` (64 uint8 pixels 0..16 as bytes), ``label``. ``python write_partitions.py /tmp/digits``
"""

import argparse
import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd


def digits_frame(*, invert: bool = False) -> pd.DataFrame:
    """Every image as a row, in a fixed shuffled order; ``invert``: their negatives (a drifted data set)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = digits.images.reshape(-1, 64).astype(np.uint8)
    pixels, order = (16 - pixels if invert else pixels), np.random.default_rng(0).permutation(len(pixels))
    return pd.DataFrame({"id": [f"digit-{i:05d}" for i in order], "image": [pixels[i].tobytes() for i in order],
                         "label": digits.target[order].astype(np.int64)})


def write_partitions(out: str | Path, *, days: int = 3, rows: int | None = None, invert: bool = False) -> list[Path]:
    """The first ``rows`` images (or all) as ``days`` partitions ``date=YYYY-MM-DD/part-0.parquet``."""
    frame, written = digits_frame(invert=invert).iloc[:rows], []
    for day, part in enumerate(np.array_split(np.arange(len(frame)), days)):
        path = Path(out) / f"date={dt.date(2026, 1, 1) + dt.timedelta(days=day)}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.iloc[part].to_parquet(path.with_suffix(".tmp"), index=False)
        written.append(path.with_suffix(".tmp").replace(path).parent)  # whole: no reader sees half a partition
    return written


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rows", type=int, help="only the first ROWS images")
    parser.add_argument("--invert", action="store_true", help="write the negatives (a drifted data set)")
    print(*write_partitions(**vars(parser.parse_args())), sep="\n")
