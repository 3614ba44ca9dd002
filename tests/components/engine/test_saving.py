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


def test_the_saved_state_is_the_parameters_themselves_and_a_copy_of_the_buffers():
    """The update that would change the parameters waits for the save; a forward changes the buffers (BatchNorm's
    running statistics) at once, so those are copied when the save starts."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 3)).sum().backward()
    optimizer.step()
    state = saveable_state(model, optimizer)
    assert state["model"]["0.weight"].data_ptr() == model[0].weight.data_ptr()
    saved_mean = state["model"]["1.running_mean"].clone()
    model(torch.randn(8, 3) * 5 + 3)  # the next step's forward
    assert not torch.equal(model[1].running_mean, saved_mean)
    assert torch.equal(state["model"]["1.running_mean"], saved_mean)
    assert state["optim"]["state"]
