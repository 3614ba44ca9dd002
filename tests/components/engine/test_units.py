"""Unit tests of the trainer's pieces that need no process group: schedule, sampler, retention, saves."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.engine.data import BatchStream
from ctpipe.components.engine.schedule import build_scheduler, lr_multiplier
from ctpipe.components.lib.errors import ConfigError, TrainingError
from ctpipe.components.run_config import load_config


def test_warmup_then_cosine_values():
    kw = dict(warmup_steps=4, max_steps=14, min_lr_ratio=0.1)
    assert [lr_multiplier(s, **kw) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_multiplier(4, **kw) == pytest.approx(1.0)  # cosine starts at the peak
    assert lr_multiplier(9, **kw) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # halfway
    assert lr_multiplier(14, **kw) == pytest.approx(0.1)
    values = [lr_multiplier(s, **kw) for s in range(4, 15)]
    assert all(a >= b for a, b in zip(values, values[1:], strict=False))  # monotone decay


def test_scheduler_steps_per_optimizer_step():
    param = nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([param], lr=2.0)
    sched = build_scheduler(opt, warmup_steps=2, max_steps=6, min_lr_ratio=0.0)
    seen = []
    for _ in range(6):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen[:2] == [1.0, 2.0]
    assert seen[2] == pytest.approx(2.0)
    assert seen[-1] < seen[2]


@pytest.mark.parametrize("n,world", [(103, 2), (100, 4), (7, 3)])
def test_sampler_shards_are_disjoint_and_complete(n, world):
    streams = [BatchStream(n, batch_size=1, rank=r, world_size=world, seed=5) for r in range(world)]
    for epoch in range(2):
        shards = [
            [int(streams[r].next_indices()) for _ in range(streams[r].batches_per_epoch)]
            for r in range(world)
        ]
        flat = [i for shard in shards for i in shard]
        assert len(flat) == len(set(flat)), "ranks overlap"
        usable = (n // world) * world  # drop_last: every rank gets the same count
        assert len(flat) == usable and set(flat) <= set(range(n))
        if epoch == 0:
            first = flat
    assert flat != first  # set_epoch reshuffles


def test_sampler_position_restores_the_same_batches():
    a = BatchStream(50, batch_size=4, rank=1, world_size=2, seed=3)
    for _ in range(8):  # crosses an epoch boundary (6 batches per epoch)
        a.next_indices()
    b = BatchStream(50, batch_size=4, rank=1, world_size=2, seed=3)
    b.restore(a.state())
    assert all(torch.equal(a.next_indices(), b.next_indices()) for _ in range(10))


def test_batch_larger_than_shard_names_the_field():
    with pytest.raises(ConfigError, match="train.batch_size"):
        BatchStream(10, batch_size=8, rank=0, world_size=2, seed=0)


@pytest.mark.parametrize(
    "override,field",
    [
        ("train.warmup_steps=100000", "train.warmup_steps"),
        ("train.strategy=zero3", "train.strategy"),
        ("train.mixed_precision=fp8", "train.mixed_precision"),
        ("train.workers=0", "train.workers"),
        ("train.grad_clip=-1", "train.grad_clip"),
        ("train.eval_every=0", "train.eval_every"),
        ("train.keep_best=0", "train.keep_best"),
        ("train.timeout_minutes=0", "train.timeout_minutes"),
        ("train.lr=abc", "train.lr"),
        ("select.metric=accuracy", "select.metric"),
    ],
)
def test_config_errors_name_the_field(override, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_config(None, [override])


def _fake_checkpoint(root, step, complete=True):
    path = ckpt.checkpoint_path(root, step)
    path.mkdir(parents=True)
    if complete:
        (path / ckpt.COMPLETE_MARKER).write_text(str(step))
    return path


def test_retention_keeps_n_best_plus_latest(tmp_path):
    accuracies = {10: 0.5, 20: 0.9, 30: 0.7, 40: 0.8, 50: 0.6}
    entries = [ckpt.IndexEntry(s, {"val_accuracy": a}) for s, a in accuracies.items()]
    for s in accuracies:
        _fake_checkpoint(tmp_path, s)
    _fake_checkpoint(tmp_path, 60, complete=False)  # a crashed save
    deleted = ckpt.apply_retention(tmp_path, entries, keep_best=2, metric="val_accuracy", mode="max")
    remaining = {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)}
    assert remaining == {20, 40, 50}  # two best + latest complete
    assert set(deleted) == {10, 30, 60}
    assert {e.step for e in entries if e.kept} == {20, 40, 50}
    index = ckpt.write_index(tmp_path, entries, metric="val_accuracy", mode="max", extra={})
    assert index["best_step"] == 20 and index["latest_step"] == 50
    assert len(json.loads((tmp_path / "index.json").read_text())["checkpoints"]) == 5


def test_retention_min_mode(tmp_path):
    entries = [ckpt.IndexEntry(s, {"val_loss": v}) for s, v in {1: 0.3, 2: 0.1, 3: 0.2}.items()]
    for e in entries:
        _fake_checkpoint(tmp_path, e.step)
    ckpt.apply_retention(tmp_path, entries, keep_best=1, metric="val_loss", mode="min")
    assert {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)} == {2, 3}


def _save_killed_before_marker(root, step: int, model, opt) -> None:
    """A save of ``step`` killed after its shards are written, before its completion marker."""

    def crash():
        raise KeyboardInterrupt("killed mid-save")

    with pytest.raises(KeyboardInterrupt):
        ckpt.save_checkpoint(root, step, model=model, optimizer=opt, rank_state={}, meta={"step": step}, rank=0,
                             before_marker=crash)


def test_crash_during_save_leaves_previous_checkpoint_usable(tmp_path):
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    good = {k: v.clone() for k, v in model.state_dict().items()}
    ckpt.save_checkpoint(
        tmp_path, 1, model=model, optimizer=opt, rank_state={"x": torch.ones(1)}, meta={"step": 1}, rank=0
    )
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    _save_killed_before_marker(tmp_path, 2, model, opt)
    assert ckpt.checkpoint_path(tmp_path, 2).is_dir()  # shards were written ...
    latest = ckpt.latest_complete(tmp_path)
    assert latest == ckpt.checkpoint_path(tmp_path, 1)  # ... but only the complete one counts
    fresh = nn.Linear(3, 2)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=0.1)
    meta, rank_state = ckpt.load_checkpoint(latest, model=fresh, optimizer=fresh_opt, rank=0)
    assert meta["step"] == 1 and torch.equal(rank_state["x"], torch.ones(1))
    assert all(torch.equal(fresh.state_dict()[k], good[k]) for k in good)


def test_weights_hash_covers_names_dtypes_and_bytes():
    a = {"w": torch.zeros(2, 2), "b": torch.ones(2)}
    assert ckpt.state_dict_sha256(a) == ckpt.state_dict_sha256({"b": torch.ones(2), "w": torch.zeros(2, 2)})
    assert ckpt.state_dict_sha256(a) != ckpt.state_dict_sha256({"w": torch.zeros(4), "b": torch.ones(2)})
    assert ckpt.state_dict_sha256(a) != ckpt.state_dict_sha256(
        {"w": torch.zeros(2, 2, dtype=torch.float64), "b": torch.ones(2)}
    )
    assert ckpt.state_dict_sha256({"x": torch.zeros(2, dtype=torch.bfloat16)})


def test_resaving_a_step_unmarks_it_before_writing(tmp_path):
    model = nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    ckpt.save_checkpoint(tmp_path, 3, model=model, optimizer=opt, rank_state={}, meta={"step": 3}, rank=0)
    assert ckpt.is_complete(ckpt.checkpoint_path(tmp_path, 3))
    _save_killed_before_marker(tmp_path, 3, model, opt)
    assert ckpt.latest_complete(tmp_path) is None  # a half-rewritten directory never keeps its old marker


def test_a_deletion_killed_midway_leaves_no_marked_half_checkpoint(tmp_path, monkeypatch):
    """Retention killed while it removes a directory (shards gone, process dead) must not leave the marker:
    before, `.complete` could outlive the shards, so selection (reading the index written before the kill,
    which still lists the step as kept) picked a checkpoint with missing files."""
    from types import SimpleNamespace

    from ctpipe.components.engine import checkpoint_index

    entries = [ckpt.IndexEntry(s, {"val_accuracy": a}) for s, a in {1: 0.9, 2: 0.5, 3: 0.6}.items()]
    for e in entries:
        (_fake_checkpoint(tmp_path, e.step) / "__0_0.distcp").write_text("shard")

    def killed_after_the_shards(path, ignore_errors=False):
        for shard in Path(path).glob("*.distcp"):
            shard.unlink()
        raise KeyboardInterrupt("killed while deleting")

    monkeypatch.setattr(checkpoint_index, "shutil", SimpleNamespace(rmtree=killed_after_the_shards))
    with pytest.raises(KeyboardInterrupt):
        ckpt.apply_retention(tmp_path, entries, keep_best=1, metric="val_accuracy", mode="max")
    monkeypatch.undo()
    half = ckpt.checkpoint_path(tmp_path, 2)
    assert not ckpt.is_complete(half)  # no longer a checkpoint for resume or selection
    ckpt.apply_retention(tmp_path, entries, keep_best=1, metric="val_accuracy", mode="max")
    assert {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)} == {1, 3}


@pytest.mark.parametrize("metric, mode, values, best", [
    ("val_loss", "min", {1: 0.5, 2: math.nan, 3: 0.3}, 3),
    ("val_loss", "min", {1: math.nan, 2: 0.5, 3: 0.3}, 3),
    ("val_accuracy", "max", {1: 0.6, 2: math.nan, 3: 0.8}, 3),
])
def test_a_non_finite_validation_metric_ranks_last_and_never_costs_the_best_checkpoint(
    tmp_path, metric, mode, values, best
):
    """A NaN metric (a task's row metric, a bf16 eval overflow) compared False both ways, so sorting left the
    order arbitrary: with {0.5, NaN, 0.3} and mode min, step 1 (0.5) ranked first, retention kept it and
    deleted step 3 (0.3), and selection exported it."""
    entries = [ckpt.IndexEntry(s, {metric: v, "val_loss": v if metric == "val_loss" else 1.0})
               for s, v in values.items()]
    ranked = ckpt.rank_entries(entries, metric, mode)
    assert ranked[0].step == best
    assert ranked[-1].step == next(s for s, v in values.items() if math.isnan(v))
    for e in entries:
        _fake_checkpoint(tmp_path, e.step)
    _fake_checkpoint(tmp_path, 4)  # the latest, always kept
    entries.append(ckpt.IndexEntry(4, {metric: values[best] + (0.1 if mode == "min" else -0.1), "val_loss": 1.0}))
    ckpt.apply_retention(tmp_path, entries, keep_best=1, metric=metric, mode=mode)
    assert {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)} == {best, 4}


class _RunsCode:
    """Pickles as a call of ``exec``: what a tampered ``.metadata`` on a shared volume could hold."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def test_a_checkpoint_whose_metadata_would_run_code_is_refused_without_running_it(tmp_path):
    """DCP reads a checkpoint's `.metadata` with plain pickle.load: before, loading a checkpoint (resume,
    selection's export) executed whatever a tampered file named. Now only DCP's metadata classes, torch sizes,
    dtypes and layouts, and paths may appear in it; anything else is refused before it is called."""
    import pickle

    model = nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    path = ckpt.save_checkpoint(tmp_path, 1, model=model, optimizer=opt, rank_state={}, meta={"step": 1}, rank=0)
    fresh = nn.Linear(2, 2)
    ckpt.load_model_weights(path, fresh)  # a real checkpoint's metadata loads
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())

    marker = tmp_path / "code-ran"
    (path / ".metadata").write_bytes(pickle.dumps(_RunsCode(marker)))
    for load in (lambda: ckpt.load_model_weights(path, nn.Linear(2, 2)),
                 lambda: ckpt.load_checkpoint(path, model=fresh, optimizer=torch.optim.AdamW(fresh.parameters()), rank=0)):
        with pytest.raises(TrainingError, match="names builtins.exec, which a checkpoint never holds: refused"):
            load()
        assert not marker.exists()


def test_metadata_pickled_by_debians_python_loads_and_getattr_reaches_only_enum_members(tmp_path):
    """Python 3.11.2 (Debian 12's, the local image base) pickles an enum member as `getattr(Class, "NAME")`: DCP's
    `.metadata` holds one (`_MEM_FORMAT_ENCODING`), and selection refused every checkpoint trained in that image.
    getattr is now allowed for exactly that, a member of an allowed enum class by name, and nothing else."""
    import enum
    import io
    import pathlib
    import pickle

    class PickledAsDebian(pickle.Pickler):
        def reducer_override(self, obj):
            if isinstance(obj, enum.Enum):
                return getattr, (type(obj), obj.name)
            return NotImplemented

    def repickle(path: Path, rewrite=lambda metadata: metadata) -> None:
        metadata = pickle.loads((path / ".metadata").read_bytes())  # our own checkpoint: trusted here
        out = io.BytesIO()
        PickledAsDebian(out).dump(rewrite(metadata))
        assert b"getattr" in out.getvalue()
        (path / ".metadata").write_bytes(out.getvalue())

    model = nn.Linear(2, 2)
    path = ckpt.save_checkpoint(tmp_path, 1, model=model, optimizer=torch.optim.AdamW(model.parameters()),
                                rank_state={}, meta={"step": 1}, rank=0)
    repickle(path)
    fresh = nn.Linear(2, 2)
    ckpt.load_model_weights(path, fresh)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in model.state_dict().items())

    class ReachesAMethod:
        def __reduce__(self):
            return getattr, (pathlib.PosixPath, "cwd")

    repickle(path, lambda metadata: [metadata, ReachesAMethod()])
    with pytest.raises(TrainingError, match="getattr of PosixPath.cwd, not a member of an enum"):
        ckpt.load_model_weights(path, nn.Linear(2, 2))
