"""benchmarks/soak.py --days N --fast: a few simulated days with a killed run and a full disk, audited."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.fixtures.paths import REPO_ROOT


def test_a_few_fast_days_lose_nothing_and_keep_the_registry_within_its_limit(tmp_path):
    # Day 2's first attempt is killed (no summary, its MLflow run RUNNING), day 3's meets a full disk: both retried.
    proc = subprocess.run(
        [sys.executable, "soak.py", "--days", "4", "--fast", "--outage-seconds", "0", "--workdir", str(tmp_path)],
        cwd=REPO_ROOT / "benchmarks", capture_output=True, text=True, timeout=600,
    )
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (summary["lost"], summary["inconsistent"], summary["duplicate"]) == (0, 0, 0)
    assert summary["attempts_failed"] == 2 and summary["model_versions"] == 4
    assert 0 < summary["largest_registry_tag_bytes"] < summary["registry_tag_limit_bytes"]
    assert set(summary["home_bytes"]) == {"4"}


def test_days_without_fast_is_refused():
    proc = subprocess.run([sys.executable, "soak.py", "--days", "365"], cwd=REPO_ROOT / "benchmarks",
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--days needs --fast" in proc.stderr
