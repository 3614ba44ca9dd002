"""Above train.in_memory_rows each rank reads only its shard of the train split's row groups."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from ctpipe.components.engine.data import ShardStream, first_batch_indices, reads_shards
from ctpipe.components.engine.shards import ShardedSplit, group_sizes, shard_positions
from ctpipe.components.lib.data.demo import generate_day
from ctpipe.components.lib.data.snapshot import (
    SnapshotWriter,
    assign_splits,
    infer_schema,
    load_snapshot,
    split_keys,
)
from ctpipe.components.lib.data.split_files import take_rows
from ctpipe.components.tasks.legacy import with_members
from ctpipe.components.tasks.tabular import make_task


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    """A snapshot whose train split has ~29 row groups of uneven sizes (one write per day)."""
    root = tmp_path_factory.mktemp("shards")
    schema = None
    for day, rows in enumerate([1300, 1000, 700]):
        data = generate_day(day, rows, 0, False, key_offset=day * 2000)
        if schema is None:
            schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
            writer = SnapshotWriter(root, schema, task=make_task(), row_group_rows=97)
        writer.add(data, assign_splits(split_keys(data, schema), val_fraction=0.1, test_fraction=0.1, salt="s"))
    writer.close(data_uri="mem://", files=[], fingerprint="f")
    return load_snapshot(root)


def _shards(snap, rank, world=2, seed=7):
    return ShardedSplit(snap.root / "train.parquet", make_task(), snap.state, rank=rank, world_size=world, seed=seed)


def test_a_rank_reads_and_encodes_only_its_row_groups(snap):
    sizes = group_sizes(snap.root / "train.parquet")
    n = sum(sizes)
    assert len(sizes) > 20 and len(set(sizes)) > 1
    shards = _shards(snap, rank=1)
    loaded = shards.load(epoch=0)
    assert len(loaded) == shards.rows_encoded == n // 2
    # Only the groups its slice touches, two of them at most partly: far fewer than the whole split.
    assert n // 2 <= shards.rows_read <= n // 2 + 2 * max(sizes)
    whole = make_task().codec.encode(snap.frame("train"), snap.state)
    positions = shards.positions(0)
    assert torch.equal(loaded.targets, whole.targets[positions])
    assert all(torch.equal(a, b[positions]) for a, b in zip(loaded.inputs, whole.inputs, strict=True))


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ranks_cover_the_split_once_an_epoch_minus_the_documented_drop(snap, world):
    sizes = group_sizes(snap.root / "train.parquet")
    n = sum(sizes)
    epochs = []
    for epoch in range(2):
        per_rank = [shard_positions(sizes, rank=r, world_size=world, seed=3, epoch=epoch).tolist() for r in range(world)]
        assert {len(p) for p in per_rank} == {n // world}  # equal counts: equal batch counts, no hang
        flat = [i for p in per_rank for i in p]
        assert len(set(flat)) == len(flat) == n - n % world and set(flat) <= set(range(n))
        epochs.append(per_rank)
    assert epochs[0] != epochs[1]  # each epoch draws another permutation
    assert shard_positions(sizes, rank=0, world_size=world, seed=3, epoch=0).tolist() == epochs[0][0]  # seeded


def test_the_sanity_first_batch_is_rank_0s_first_sharded_batch(snap):
    n = snap.rows("train")
    assert reads_shards(n, in_memory_rows=n - 1, task=make_task())
    assert not reads_shards(n, in_memory_rows=n, task=make_task())
    stream = ShardStream(_shards(snap, rank=0, seed=11), batch_size=32)
    _, targets = stream.next_batch(torch.device("cpu"))
    first = first_batch_indices(n, batch_size=32, world_size=2, seed=11, group_sizes=group_sizes(snap.root / "train.parquet"))
    raw = take_rows(snap.root / "train.parquet", torch.tensor(first).numpy())
    assert torch.equal(targets, make_task().codec.encode(raw, snap.state).targets)


def test_the_sanity_step_shows_rank_0s_first_sharded_batch(snap):
    from ctpipe.components.run_config import load_config
    from ctpipe.components.steps.sanity_checks.sample import load_sanity_data

    cfg = load_config(None, ["data.key=customer_id", "train.in_memory_rows=0", "train.batch_size=32",
                             "train.workers=2", "train.seed=11"])
    first = load_sanity_data(snap, cfg, make_task()).first_batch
    inputs, targets = ShardStream(_shards(snap, rank=0, seed=11), batch_size=32).next_batch(torch.device("cpu"))
    assert "row-group permutation" in first.drawn
    assert torch.equal(first.examples.targets, targets)
    assert all(torch.equal(a, b) for a, b in zip(first.examples.inputs, inputs, strict=True))


def test_a_restored_shard_stream_gives_the_same_batches(snap):
    a = ShardStream(_shards(snap, rank=1), batch_size=64)
    per_epoch = a.batches_per_epoch
    for _ in range(per_epoch + 2):  # into the second epoch
        a.next_batch(torch.device("cpu"))
    b = ShardStream(_shards(snap, rank=1), batch_size=64)
    b.restore(a.state())
    for _ in range(per_epoch):  # across the next epoch boundary
        (xa, ya), (xb, yb) = a.next_batch(torch.device("cpu")), b.next_batch(torch.device("cpu"))
        assert torch.equal(ya, yb) and all(torch.equal(p, q) for p, q in zip(xa, xb, strict=True))


def test_init_targets_are_the_whole_split_in_file_order(snap):
    whole = make_task().codec.encode(pd.read_parquet(snap.root / "train.parquet"), snap.state)
    assert torch.equal(_shards(snap, rank=0).targets(), whole.targets)


@pytest.mark.parametrize("world", [2, 3, 7])
def test_a_rank_loads_only_its_val_rows_and_scores_them_as_from_the_whole_split(snap, world, monkeypatch):
    from contextlib import nullcontext

    import torch.distributed as dist

    from ctpipe.components.engine.data import load_split
    from ctpipe.components.engine.device import Dist
    from ctpipe.components.engine.loss_eval import evaluate, val_shard
    from ctpipe.components.run_config import load_config

    monkeypatch.setattr(dist, "all_reduce", lambda tensor: None)  # each rank's own totals, compared below
    task = make_task()
    cfg = load_config(None, ["data.key=customer_id", "model.hidden=8", "model.depth=1"])
    torch.manual_seed(0)
    model = task.model.build(cfg, snap.state)
    whole = load_split(snap, "val", task)
    n = len(whole)
    for rank in range(world):
        d = Dist(rank=rank, world_size=world, local_rank=0, device=torch.device("cpu"))
        shard = val_shard(snap, task, d)
        assert len(shard) == n and len(shard.examples) <= -(-n // world)  # at most its share of rows
        assert evaluate(model, shard, d, nullcontext, task) == evaluate(model, whole, d, nullcontext, task)


def test_init_targets_read_only_the_columns_the_task_names(snap):
    """The class prior needs the labels, not whole rows: a task that names its target columns
    (``Task.target_columns``) gets frames of those columns only, and the same targets."""
    task = make_task()
    seen: list[list[str]] = []
    original = task.codec.targets

    def recording(frame, state):
        seen.append(list(frame.columns))
        return original(frame, state)

    task = with_members(task, targets=recording)
    shards = ShardedSplit(snap.root / "train.parquet", task, snap.state, rank=0, world_size=2, seed=7)
    whole = make_task().codec.encode(pd.read_parquet(snap.root / "train.parquet"), snap.state)
    assert torch.equal(shards.targets(), whole.targets)
    assert seen and all(columns == [snap.state["label"]] for columns in seen), seen[:2]
