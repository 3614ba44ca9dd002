"""Write scikit-learn's diabetes data (442 rows, label ``target``) as daily Parquet partitions.

    python examples/regression/write_partitions.py /tmp/diabetes --days 3
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path


def main() -> None:
    from sklearn.datasets import load_diabetes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--days", type=int, default=3)
    args = parser.parse_args()
    frame = load_diabetes(as_frame=True).frame
    for day in range(args.days):
        part = args.out / f"date={dt.date(2026, 1, 1) + dt.timedelta(days=day)}" / "part-0.parquet"
        part.parent.mkdir(parents=True, exist_ok=True)
        tmp = part.with_suffix(".parquet.tmp")
        frame.iloc[day :: args.days].to_parquet(tmp, index=False)
        tmp.replace(part)  # written whole: a reader never sees half a partition
        print(part)


if __name__ == "__main__":
    main()
