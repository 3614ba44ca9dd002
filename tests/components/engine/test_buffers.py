"""A model with buffers (BatchNorm running statistics) under FSDP2 on two ranks: every rank validates with, and
the checkpoint and export hold, the same buffers, so the export reproduces the indexed validation metrics.

FSDP2 shards parameters only; each rank's BatchNorm updates its running statistics from its own batches,
and nothing (unlike DDP's broadcast_buffers) kept them equal across ranks."""

from __future__ import annotations

import os
import sys
import textwrap

import pytest

from ctpipe.components.steps.select_checkpoint.select import select_and_export
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.tasks.registry import _CACHE
from tests.components.engine.test_distributed import snapshot_dir, tiny_config  # noqa: F401

USER_TASK = '''
from torch import nn
from ctpipe.components.tasks.tabular import TabularClassification


class NormalisedInputs(nn.Module):
    """A user's model: BatchNorm over the numeric inputs in front of the tabular MLP."""

    def __init__(self, inner, n_numeric):
        super().__init__()
        self.norm = nn.BatchNorm1d(n_numeric)
        self.inner = inner

    @property
    def head(self):
        return self.inner.head

    def forward(self, x_num, x_cat):
        return self.inner(self.norm(x_num), x_cat)


class WithBatchNorm(TabularClassification):
    def build_model(self, config, state):
        return NormalisedInputs(super().build_model(config, state), len(state["numeric"]))

    def shard_units(self, model):
        return list(model.inner.blocks)


def make_task(**options):
    return WithBatchNorm()
'''


@pytest.fixture
def batchnorm_task(tmp_path, monkeypatch):
    (tmp_path / "user_bn_task.py").write_text(textwrap.dedent(USER_TASK))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    yield "user_bn_task:make_task"
    sys.modules.pop("user_bn_task", None)
    _CACHE.clear()


def test_the_export_of_a_batchnorm_model_reproduces_the_indexed_validation_loss(snapshot_dir, batchnorm_task,  # noqa: F811
                                                                               tmp_path):
    # Before: 'the export of step 8 scores val_loss=... on the validation split, but training indexed ...: the
    # consolidated weights do not match the checkpoint' (each rank validated its half with its own statistics;
    # the checkpoint kept one rank's).
    config = tiny_config(f"task.entrypoint={batchnorm_task}", "select.metric=val_loss")
    train_model(snapshot_dir, str(tmp_path / "ckpt"), config, tracking_uri=None, mlflow_run_id=None, job_name="bn")
    selected = select_and_export(str(tmp_path / "ckpt"), snapshot_dir, config, str(tmp_path / "model.pt"))
    assert selected.metric_name == "val_loss"
