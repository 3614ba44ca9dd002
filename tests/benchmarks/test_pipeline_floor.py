"""benchmarks/pipeline.py's floor: the least orchestration share the run's own CPU work allows on this machine."""

from __future__ import annotations

import importlib.util
import random
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.paths import REPO_ROOT

spec = importlib.util.spec_from_file_location("pipeline_bench", REPO_ROOT / "benchmarks" / "pipeline.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def share(seconds: float, compute: float) -> float:
    return (seconds - compute) / seconds


def test_a_run_whose_cores_were_busy_until_training_is_at_its_floor():
    floor = bench.orchestration_floor(seconds=14.0, before_train_seconds=4.0, core_seconds_before_train=8.0, cores=2,
                                      compute_before_train=1.5, compute_from_train=9.0)
    assert floor == pytest.approx(share(14.0, 10.5))


def test_cores_left_idle_before_training_lower_the_floor_by_what_they_could_have_done():
    floor = bench.orchestration_floor(seconds=14.0, before_train_seconds=4.0, core_seconds_before_train=4.0, cores=2,
                                      compute_before_train=1.5, compute_from_train=9.0)
    # 4 core-seconds on 2 cores: 2 s instead of 4 before training, so 1.5 s of orchestration instead of 3.5.
    assert floor == pytest.approx(1.5 / 12.0)


def test_the_floor_never_exceeds_the_measured_share():
    rng = random.Random(0)
    for _ in range(500):
        cores = rng.choice([1, 2, 4, 16])
        before = rng.uniform(0.5, 10)
        compute_before = rng.uniform(0, before)
        compute_from = rng.uniform(0.1, 20)
        seconds = before + compute_from + rng.uniform(0, 5)
        used = rng.uniform(compute_before, cores * before)  # the steps' own compute was CPU too
        floor = bench.orchestration_floor(seconds=seconds, before_train_seconds=before, core_seconds_before_train=used,
                                          cores=cores, compute_before_train=compute_before,
                                          compute_from_train=compute_from)
        assert floor <= share(seconds, compute_before + compute_from) + 1e-12


def test_core_seconds_integrate_the_samples_between_two_times():
    sampler = bench.CpuSampler()
    sampler.samples = [(10.0, 2.0), (11.0, 1.0), (12.0, 0.5), (13.0, 2.0)]  # busy cores over the second before
    assert sampler.core_seconds(10.0, 12.0) == pytest.approx(1.0 + 0.5)
    assert sampler.core_seconds(10.0, 11.5) == pytest.approx(1.0 + 0.5 * 0.5)


@pytest.mark.skipif(not Path("/proc/stat").is_file() or sys.platform != "linux", reason="reads /proc/stat")
def test_the_sampler_sees_a_busy_core():
    with bench.CpuSampler(interval=0.02) as sampler:
        started = time.time()
        while time.time() - started < 0.4:
            pass
        ended = time.time()
    assert sampler.core_seconds(started, ended) >= 0.2  # this loop alone kept one core busy for 0.4 s
