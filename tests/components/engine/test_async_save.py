"""A checkpoint save runs beside the steps after it: no step waits for the write, the checkpoint holds the state of
its own step, and the next save (or the end) is what waits. One in-process rank (gloo, world size 1)."""

from __future__ import annotations

import threading

from ctpipe.components.engine import checkpointing as ckpt
from tests.fixtures.one_rank import one_rank_trainer


def test_the_steps_after_a_save_run_while_it_writes_and_it_holds_its_own_steps_state(tmp_path, monkeypatch):
    """Before: the step after a save waited for the whole write before its update (56 ms a save on the loop's
    critical path); here the save of step 10 cannot finish before step 15 has begun, which then deadlocked."""
    steps = ["train.max_steps=20", "train.eval_every=10", "train.checkpoint_every=10"]
    with one_rank_trainer(tmp_path, steps) as trainer:
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
    assert released == [True]  # steps 11-15 ran while step 10's save was writing
    assert result["steps"] == 20 and ckpt.is_complete(ckpt.checkpoint_path(tmp_path / "ckpt", 20))
    saved = ckpt.read_model_state(ckpt.checkpoint_path(tmp_path / "ckpt", 10))
    assert ckpt.state_dict_sha256(saved) == at_save["weights"]  # not the weights of a later step
    assert ckpt.checkpoint_damage(ckpt.checkpoint_path(tmp_path / "ckpt", 10)) is None
