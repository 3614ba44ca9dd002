"""Evaluation benchmark: the paired bootstrap and the blessing rules, and the stable split hashing.

    python benchmarks/evaluation.py [--repeats 3]

Blessing: ``judge_candidate`` (candidate, champion and prior predictor on the same 1,000 resamples, 3
classes, default rules) at 1k, 10k and 100k test rows, and with 8 slices at 100k rows. Splits:
``split_keys`` on 1,000,000 demo rows (10 columns) by key and by content, against pandas'
``hash_pandas_object`` on the same frame (the old, dtype-dependent content hash) as the ratio. Medians
of the repeats; the last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import Schema, split_keys
from ctpipe.components.steps.evaluate.judgement import judge_candidate


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _models(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)

    def model():
        pred = np.where(rng.random(n) < 0.8, y, (y + 1) % 3)
        p = np.full((n, 3), 0.1)
        p[np.arange(n), pred] = 0.8
        return p

    return y, model(), model()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    out: dict[str, float] = {}
    config = Config()
    for n in (1_000, 10_000, 100_000):
        y, cand, champ = _models(n)
        frame = pd.DataFrame(index=range(n))
        out[f"bless_{n}_rows_s"] = _median_seconds(
            lambda y=y, cand=cand, champ=champ, frame=frame: judge_candidate(y, cand, champ, config, frame, []),
            args.repeats)
        print(f"judge_candidate, {n} rows, 1000 resamples: {out[f'bless_{n}_rows_s']:.3f} s", flush=True)
    sliced = Config()
    sliced.evaluate.slices = ["segment"]
    y, cand, champ = _models(100_000)
    frame = pd.DataFrame({"segment": np.repeat([f"s{i}" for i in range(8)], 12_500)})
    out["bless_100000_rows_8_slices_s"] = _median_seconds(
        lambda: judge_candidate(y, cand, champ, sliced, frame, []), args.repeats)
    print(f"judge_candidate, 100000 rows, 8 slices: {out['bless_100000_rows_8_slices_s']:.3f} s", flush=True)

    data = pd.concat([generate_day(i, 100_000, 0, False, i * 100_000) for i in range(10)], ignore_index=True)
    keyed = Schema(label="label", key="customer_id", numeric=[], categorical=[], classes=[])
    content = Schema(label="label", key=None, numeric=[], categorical=[], classes=[])
    out["split_keys_by_key_1m_s"] = _median_seconds(lambda: split_keys(data, keyed), args.repeats)
    out["split_keys_by_content_1m_s"] = _median_seconds(lambda: split_keys(data, content), args.repeats)
    old = _median_seconds(lambda: pd.util.hash_pandas_object(data, index=False).astype(str), args.repeats)
    out["content_vs_old_hash_ratio"] = out["split_keys_by_content_1m_s"] / old
    print(f"split_keys on 1,000,000 rows: by key {out['split_keys_by_key_1m_s']:.2f} s, by content "
          f"{out['split_keys_by_content_1m_s']:.2f} s ({out['content_vs_old_hash_ratio']:.0f}x the old "
          f"hash_pandas_object, {old:.2f} s)", flush=True)
    print(json.dumps({k: round(v, 3) for k, v in out.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
