"""End to end: `ctpipe run --task causal_lm` on the demo text passes every step; a second run sees the first.

Kept small for the shared 2-core machine: the tiny decoder, few steps, the demo corpus as partitions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = [
    "train.max_steps=40",
    "train.eval_every=20",
    "train.checkpoint_every=20",
    "train.warmup_steps=5",
    "train.batch_size=16",
]


def ctpipe(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTPIPE_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run(
        [sys.executable, "-m", "ctpipe.pipelines.cli.main", *args], capture_output=True, text=True, env=env, timeout=1200
    )


def run_lm(home: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    sets = [arg for item in (*FAST, *extra) for arg in ("--set", item)]
    result = ctpipe("run", "--task", "causal_lm", *sets, home=home)
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert last.endswith("summary.json"), result.stdout[-3000:] + result.stderr[-3000:]
    return result, json.loads(Path(last).read_text())


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lm-home")


@pytest.fixture(scope="module")
def first(home):
    return run_lm(home)


def test_first_lm_run_passes_every_step_and_becomes_champion(first, home):
    result, summary = first
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert all(v == "passed" for v in summary["steps"].values()), summary["steps"]
    candidate = summary["metrics"]["candidate"]
    assert candidate["bits_per_byte"] < 8.0 and candidate["loss"] < 5.0  # learned beyond uniform bytes
    assert summary["blessed"] is True and "champion" in summary["aliases"]
    assert any(p.name == "date=2026-01-01" for p in (home / "data-causal_lm").iterdir())
    # Text on its own terms: the partitions hold a key and the text, no label column at all.
    import pandas as pd

    part = next((home / "data-causal_lm").glob("date=*/part-0.parquet"))
    assert set(pd.read_parquet(part).columns) == {"doc_id", "text"}


def test_the_registered_lm_scores_documents_and_continues_them(first, home):
    import mlflow
    import pandas as pd

    from ctpipe.components.lib.tracking import local_tracking_uri

    assert first[0].returncode == 0
    mlflow.set_tracking_uri(local_tracking_uri(home))
    mlflow.set_registry_uri(local_tracking_uri(home))
    model = mlflow.pyfunc.load_model(f"models:/{first[1]['model_name']}@champion")
    out = model.predict(pd.DataFrame({"text": ["The assert statement", "Lambda expressions"]}))
    assert list(out.columns) == ["loss", "bits_per_byte", "continuation"] and len(out) == 2
    assert out["bits_per_byte"].between(0.5, 9.0).all()
    assert out["continuation"].map(len).gt(0).all()


def test_second_lm_run_is_compared_with_the_first(first, home):
    assert first[0].returncode == 0
    # Without the cache: the same data and config would otherwise reuse the first run's model (docs/run-form.md).
    result, summary = run_lm(home, "pipeline.caching=false")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert summary["compared_with_champion_version"] == "1"
    assert summary["model_version"] == "2"
    # Same data and seeds: the same per-document losses, so the same bits per byte.
    assert summary["metrics"]["candidate"]["bits_per_byte"] == pytest.approx(
        summary["metrics"]["champion"]["bits_per_byte"])
