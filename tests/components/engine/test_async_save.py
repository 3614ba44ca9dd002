"""A checkpoint save runs beside the steps after it: no step waits for the write, the checkpoint holds the state of
its own step, and the next save (or the end) is what waits. One in-process rank (gloo, world size 1)."""

from __future__ import annotations

import threading

import torch
import torch.distributed as dist

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.engine.device import Dist
from ctpipe.components.engine.tracker import NullTracker
from ctpipe.components.engine.trainer import Trainer
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fixtures.exact import EXACT_TRAINING


def test_the_steps_after_a_save_run_while_it_writes_and_it_holds_its_own_steps_state(tmp_path, monkeypatch):
    """Before: the step after a save waited for the whole write before its update (56 ms a save on the loop's
    critical path); here the save of step 10 cannot finish before step 15 has begun, which then deadlocked."""
    config = load_config(None, [*EXACT_TRAINING, "train.workers=1", "train.max_steps=20", "train.warmup_steps=2",
                                "train.eval_every=10", "train.checkpoint_every=10", "train.batch_size=16",
                                "model.hidden=16", "model.depth=1", "train.timeout_minutes=2"])
    write_demo_data(tmp_path / "data", days=1, rows_per_day=300, seed=1)
    snapshot = build_snapshot(str(tmp_path / "data"), config, tmp_path / "snapshot").root
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        trainer = Trainer(config, str(snapshot), str(tmp_path / "ckpt"), Dist(0, 1, 0, torch.device("cpu")),
                          NullTracker())
        step_15, released, at_save = threading.Event(), [], {}

        def before_step(step, rank):
            if step == 10:  # 10 updates done: the state the checkpoint of step 10 must hold
                at_save["weights"] = ckpt.full_weights_sha256(trainer.model, rank)
            if step == 15:
                assert not ckpt.is_complete(ckpt.checkpoint_path(tmp_path / "ckpt", 10))
                step_15.set()

        def before_marker(step, rank):
            return (lambda: released.append(step_15.wait(15))) if step == 10 else None

        monkeypatch.setattr(trainer.hooks, "before_step", before_step)
        monkeypatch.setattr(trainer.hooks, "before_marker", before_marker)
        result = trainer.run()
    finally:
        dist.destroy_process_group()
    assert released == [True]  # steps 11-15 ran while step 10's save was writing
    assert result["steps"] == 20 and ckpt.is_complete(ckpt.checkpoint_path(tmp_path / "ckpt", 20))
    saved = ckpt.read_model_state(ckpt.checkpoint_path(tmp_path / "ckpt", 10))
    assert ckpt.state_dict_sha256(saved) == at_save["weights"]  # not the weights of a later step
    assert ckpt.checkpoint_damage(ckpt.checkpoint_path(tmp_path / "ckpt", 10)) is None
