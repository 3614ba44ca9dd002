"""A checkpoint save runs beside the next step: the writer waits for it only when asked, and raises its error there;
what it saves is the state at the save, whatever the next forward changes."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from ctpipe.components.engine.saving import CheckpointWriter, saveable_state


def test_a_save_runs_beside_the_caller_until_finish_waits_for_it():
    writer = CheckpointWriter()
    release, ran_in = threading.Event(), []

    def write():
        ran_in.append(threading.current_thread().name)
        assert release.wait(30)

    writer.start(write)
    assert writer.in_flight  # the caller goes on while the save runs
    release.set()
    assert writer.finish() >= 0 and not writer.in_flight
    assert ran_in and ran_in[0] != threading.current_thread().name
    assert writer.finish() is None  # nothing in flight
    writer.close()


def test_a_failed_save_raises_where_it_is_waited_for_and_a_new_save_waits_for_the_last():
    writer = CheckpointWriter()
    order = []

    def full_disk():
        order.append("first")
        raise OSError(28, "No space left on device", "/ckpt/step_00000004")

    writer.start(full_disk)
    with pytest.raises(OSError, match="No space left on device"):
        writer.start(lambda: order.append("second"))  # starting the next save waits for (and reports) the last
    writer.start(lambda: order.append("third"))
    writer.finish()
    assert order == ["first", "third"]
    writer.start(full_disk)
    writer.abandon()  # an error elsewhere: the save's own outcome is not raised again
    assert not writer.in_flight
    writer.close()


def test_the_saved_state_is_a_copy_that_later_updates_and_forwards_leave_as_it_was():
    """Before: the save held the parameters and optimizer state themselves, so the next step's update had to wait for
    the write (56 ms of each save on the loop's critical path). The staged copy lets the save run across later steps."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 3)).sum().backward()
    optimizer.step()
    state = saveable_state(model, optimizer)
    saved = {k: v.clone() for k, v in state["model"].items()}
    saved_avg = state["optim"]["state"]["0.weight"]["exp_avg"].clone()
    assert state["model"]["0.weight"].data_ptr() != model[0].weight.data_ptr()
    for _ in range(2):  # the next steps: forward (BatchNorm's running statistics), backward, update
        model(torch.randn(8, 3) * 5 + 3).sum().backward()
        optimizer.step()
    assert not torch.equal(model[0].weight, saved["0.weight"]) and not torch.equal(model[1].running_mean,
                                                                                   saved["1.running_mean"])
    assert all(torch.equal(state["model"][k], v) for k, v in saved.items())
    assert torch.equal(state["optim"]["state"]["0.weight"]["exp_avg"], saved_avg)
    assert state["optim"]["param_groups"][0]["lr"] == optimizer.param_groups[0]["lr"]


def test_a_step_does_not_wait_for_the_save_in_flight_only_the_next_save_does(tmp_path):
    """The trainer's step runs its update while a save is still writing; starting the next save waits for it."""
    from ctpipe.components.engine import checkpointing as ckpt

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    writer, release = CheckpointWriter(), threading.Event()
    state = saveable_state(model, optimizer)

    def write():
        assert release.wait(30)  # the disk is slow: the write is still going when the next steps update
        ckpt.save_checkpoint(tmp_path, 1, model=model, optimizer=optimizer, rank_state={}, meta={"step": 1},
                             rank=0, state=state)

    writer.start(write)
    for _ in range(3):
        model(torch.randn(5, 3)).sum().backward()
        optimizer.step()
    assert writer.in_flight and not ckpt.is_complete(ckpt.checkpoint_path(tmp_path, 1))
    release.set()
    writer.start(lambda: None)  # the next save: waits for this one first
    writer.finish()
    writer.close()
    fresh = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    ckpt.load_checkpoint(ckpt.checkpoint_path(tmp_path, 1), model=fresh,
                         optimizer=torch.optim.AdamW(fresh.parameters()), rank=0)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in expected.items())  # the state at the save


def test_a_save_that_failed_is_raised_at_the_next_check_and_one_still_writing_is_not_waited_for():
    """With saves spanning many steps, a full disk must not go unnoticed until the next save: the trainer checks at
    each boundary, which never waits for a save still writing."""
    writer, release = CheckpointWriter(), threading.Event()
    writer.start(lambda: release.wait(30))
    writer.raise_if_failed()  # still writing: returns at once
    assert writer.in_flight
    release.set()
    writer.finish()

    def full_disk():
        raise OSError(28, "No space left on device", "/ckpt/step_00000004")

    writer.start(full_disk)
    while not writer._pending.done():
        threading.Event().wait(0.01)
    with pytest.raises(OSError, match="No space left on device"):
        writer.raise_if_failed()
    assert not writer.in_flight
    writer.close()
