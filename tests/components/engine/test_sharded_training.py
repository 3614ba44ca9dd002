"""The real trainer on the sharded path (train.in_memory_rows=0): two gloo ranks, each reading only its
row groups; a killed run resumes bit-identical to an uninterrupted one across an epoch boundary."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launch import train_model
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fixtures.exact import EXACT_TRAINING

# A resumed run is compared with an uninterrupted one bit for bit: EXACT_TRAINING pins what makes that exact.
SHARDED = [
    *EXACT_TRAINING, "data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "model.dropout=0.1",
    "train.workers=2", "train.max_steps=8", "train.warmup_steps=2", "train.eval_every=2",
    "train.checkpoint_every=2", "train.batch_size=32", "train.keep_best=1", "train.timeout_minutes=2",
    "train.in_memory_rows=0",
]


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded")
    write_demo_data(root / "data", days=2, rows_per_day=200, seed=1)
    build_snapshot(str(root / "data"), load_config(None, SHARDED), root / "snapshot")
    train = root / "snapshot" / "train.parquet"
    pq.write_table(pq.read_table(train), train, row_group_size=23)  # many row groups to shard
    return str(root / "snapshot")


def _train(snapshot_dir, ckpt_dir, *extra):
    return train_model(snapshot_dir, str(ckpt_dir), load_config(None, SHARDED + list(extra)),
                       tracking_uri=None, mlflow_run_id=None, job_name="t")


def test_a_killed_sharded_run_resumes_bit_identical(snapshot_dir, tmp_path, monkeypatch):
    reference = _train(snapshot_dir, tmp_path / "ref")
    rows = pq.ParquetFile(f"{snapshot_dir}/train.parquet").metadata.num_rows
    assert reference.steps == 8 and rows // 2 // 32 < 8  # the run crosses an epoch boundary
    # Rank 0 read two epochs' shards: half the split each, plus at most two partly used row groups.
    assert rows <= reference.raw["this_run"]["shard_rows_read"] <= 2 * (rows // 2 + 2 * 23)

    monkeypatch.setenv("CTPIPE_TEST_FAULT", "exit@5:1")
    with pytest.raises(TrainingError, match="rank 1 exited with code 17"):
        _train(snapshot_dir, tmp_path / "run")
    # Killed one step after step 4's save started: that save runs beside the steps (saving.py), so it may not have
    # been marked yet; resume takes whichever is the latest complete, on either side of the epoch boundary (step 5).
    latest = ckpt.step_of(ckpt.latest_complete(tmp_path / "run"))
    assert latest in (2, 4)
    monkeypatch.delenv("CTPIPE_TEST_FAULT")
    resumed = _train(snapshot_dir, tmp_path / "run")
    assert resumed.resumed_from_step == latest and resumed.steps == 8
    assert resumed.final_weights_sha256 == reference.final_weights_sha256


def test_the_sharded_path_trains_differently_from_the_whole_split_path(snapshot_dir, tmp_path):
    """The threshold decides the path: the same snapshot below it trains on the whole-split sampler."""
    sharded = _train(snapshot_dir, tmp_path / "a")
    whole = _train(snapshot_dir, tmp_path / "b", "train.in_memory_rows=100000")
    assert sharded.final_weights_sha256 != whole.final_weights_sha256
