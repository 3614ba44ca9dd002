"""Change detection for the watcher and the cache key: what each way of noticing a rewritten partition costs at
10,000 partitions.

    python benchmarks/change_detection.py [--partitions 10000] [--rows-per-partition 200] [--repeats 3]

It writes the partitions (one Parquet file each, the demo data's columns), then times, interleaved and
repeated in this one process (the machine is shared: read the ratios, not the seconds):

- ``size_mtime``: listing + the old cache key (size, mtime): no data read; misses a rewrite that keeps both;
- ``tails``: listing + sizes + each file's last 64 KiB: prepare_run's cache key before issue 46; misses a
  same-size edit before a file's tail (the one edited partition here is 4,000 rows, ~350 KB);
- ``cached``: listing + the content hashes cached by (size, mtime, change token: inode and status-change
  time locally, the object's version in a store) with a warm cache: no data read. The watcher's data version
  (``data_state``) and, since issue 46, prepare_run's cache key (``content_fingerprint``): one code path;
- ``footers``: listing + reading every file's Parquet footer (``pyarrow.parquet.read_metadata``): one small
  read per file, but a same-size rewrite with the same row count and min/max statistics looks unchanged;
- ``content``: listing + SHA-256 of every file's bytes (what a cold cache does): exact, reads all data.

The last line printed is JSON: the medians in seconds and the ratios to ``size_mtime``, the hashing rate (to
scale ``content`` to bigger partitions: it grows with bytes, the others with files), and whether each way saw a
same-size, same-mtime, same-tail rewrite of one partition (``detects_rewrite``: the labels of its first half
shuffled, as in issue 46).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from ctpipe.components.lib.data.content_fingerprint import content_fingerprint
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.files import scan_data_files, sha256_file
from ctpipe.testing.data_edits import TAIL_BYTES, shuffle_first_half, write_plain_parquet

EDITED = "part=00042"


def write_partitions(root: Path, partitions: int, rows: int) -> None:
    """``partitions`` partitions of one small Parquet file each (the same rows: the costs are per file)."""
    frame = generate_day(0, rows, seed=1, drifted=False, key_offset=0)
    for i in range(partitions):
        folder = root / f"part={i:05d}"
        folder.mkdir(parents=True)
        frame.to_parquet(folder / "data.parquet", index=False)
    # One bigger partition, plain-encoded: the one edited, its first half's labels shuffled (size, tail kept).
    write_plain_parquet(generate_day(1, 4000, seed=2, drifted=False, key_offset=0), root / EDITED / "data.parquet")


def by_tails(data: str) -> dict[str, tuple]:
    fs, listed = scan_data_files(data)
    found = {}
    for f in listed:
        with fs.open(f.full_path, "rb") as handle:
            handle.seek(max(f.size - TAIL_BYTES, 0))
            found[f.path] = (f.size, handle.read(TAIL_BYTES))
    return found


def by_size_mtime(data: str) -> dict[str, tuple]:
    _, listed = scan_data_files(data)
    return {f.path: (f.size, f.info.get("mtime")) for f in listed}


def by_footers(data: str) -> dict[str, tuple]:
    fs, listed = scan_data_files(data)
    found = {}
    for f in listed:
        with fs.open(f.full_path, "rb") as handle:
            meta = pq.read_metadata(handle)
        stats = [meta.row_group(g).column(c).statistics for g in range(meta.num_row_groups)
                 for c in range(meta.num_columns)]
        found[f.path] = (f.size, meta.num_rows, tuple(s.min if s is not None and s.has_min_max else None
                                                      for s in stats))
    return found


def by_content(data: str) -> dict[str, str]:
    fs, listed = scan_data_files(data)
    return {f.path: sha256_file(fs, f.full_path) for f in listed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--rows-per-partition", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ctpipe-change-") as tmp:
        root, cache = Path(tmp) / "data", Path(tmp) / "cache.json"
        start = time.perf_counter()
        write_partitions(root, args.partitions, args.rows_per_partition)
        data = str(root)
        content_fingerprint(data, cache)  # warm the cache
        print(f"wrote {args.partitions} partitions in {time.perf_counter() - start:.1f}s", flush=True)

        ways: dict[str, Callable[[], object]] = {
            "size_mtime": lambda: by_size_mtime(data),
            "tails": lambda: by_tails(data),
            "cached": lambda: content_fingerprint(data, cache),
            "footers": lambda: by_footers(data),
            "content": lambda: by_content(data),
        }
        times: dict[str, list[float]] = {name: [] for name in ways}
        before: dict[str, object] = {}
        for repeat in range(args.repeats):
            for name, way in ways.items():  # interleaved: a busy moment hits every way alike
                t0 = time.perf_counter()
                result = way()
                times[name].append(time.perf_counter() - t0)
                before.setdefault(name, result)
            print(f"repeat {repeat + 1}: " + ", ".join(f"{n} {t[-1]:.2f}s" for n, t in times.items()), flush=True)

        shuffle_first_half(root / EDITED / "data.parquet", "label")
        detects = {name: way() != before[name] for name, way in ways.items()}
        median = {name: statistics.median(t) for name, t in times.items()}
        total_bytes = sum(p.stat().st_size for p in root.glob("part=*/*.parquet"))
        cold = Path(tmp) / "cold.json"
        t0 = time.perf_counter()
        content_fingerprint(data, cold)  # a cold cache: every file hashed once and its hash stored
        cold_seconds = time.perf_counter() - t0
        print(json.dumps({
            "partitions": args.partitions,
            "bytes_per_file": next(root.glob("part=00000/*.parquet")).stat().st_size,
            # Hashing scales with bytes, the other ways with files: what a root of bigger partitions would cost.
            "content_hash_mb_per_second": round(total_bytes / median["content"] / 1e6, 1),
            "median_seconds": {n: round(v, 3) for n, v in median.items()},
            "cached_cold_seconds": round(cold_seconds, 3),
            "ratio_to_size_mtime": {n: round(v / median["size_mtime"], 2) for n, v in median.items()},
            "detects_rewrite": detects,
            "load_average": os.getloadavg()[0],
        }))


if __name__ == "__main__":
    main()
