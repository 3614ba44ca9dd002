"""A full disk inside a checkpoint save fails like every other write: the step, the path, "no space left on device".

The full disk is the test-only step fault (ctpipe/testing/faults.py): every write through ``open`` fails
with ENOSPC after its file is created. DCP writes the shards through ``open`` and wraps a failure in its own
``CheckpointException`` (a BaseException whose message is a traceback); the save unwraps it.
"""

from __future__ import annotations

import errno
import json

import pytest
import torch
from torch import nn

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.steps.train.launchers.base import ERROR_FILE_ENV
from ctpipe.components.steps.train.worker import _write_error
from ctpipe.testing.faults import STEP_FAULT_ENV, injected_step_fault


def _save(root, step: int):
    torch.manual_seed(0)
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters())
    return ckpt.save_checkpoint(
        root, step, model=model, optimizer=opt, rank_state={}, meta={"step": step}, rank=0
    )


def test_a_full_disk_in_a_checkpoint_save_names_the_file_and_the_cause(tmp_path, monkeypatch, capfd):
    """Before: DCP's CheckpointException (not an OSError), a traceback as its message, no marker of a disk."""
    monkeypatch.setenv(STEP_FAULT_ENV, "disk_full@train")
    with injected_step_fault("train"), pytest.raises(OSError) as raised:
        _save(tmp_path, 20)
    err = raised.value
    assert err.errno == errno.ENOSPC
    assert err.filename and str(tmp_path / "step_00000020") in err.filename
    assert not (tmp_path / "step_00000020" / ckpt.COMPLETE_MARKER).exists()  # never marked complete

    # The rank's error, as the launcher puts it on top of the train step's failure.
    error_file = tmp_path / "error-rank0.json"
    monkeypatch.setenv(ERROR_FILE_ENV, str(error_file))
    _write_error(err)
    message = json.loads(error_file.read_text())["message"]
    for needed in ("step 'train'", err.filename, "no space left on device"):
        assert needed in message, message
    capfd.readouterr()

    # With room again, the same step saves and is complete.
    assert (_save(tmp_path, 20) / ckpt.COMPLETE_MARKER).exists()
