"""The trainer's step waits on the device no more than a bare loop does: no host sync per step.

Reading a device tensor on the host (``.item()``, ``float()``, ``.tolist()``, a Python ``if`` on a tensor) waits for
every kernel queued before it; a GPU then idles while the next step is being queued. A bare loop (forward, backward,
clip, step) reads only what torch's AdamW reads itself (its step counters, which live on the CPU); the trainer reads
its steps' losses and norms at its boundaries only (log window, evaluation, checkpoint), all of them at once.
Checked on one in-process rank (gloo, world size 1) by counting the reads against a bare step's.
"""

from __future__ import annotations

import torch

from ctpipe.components.engine.parallelize import clip_grad_norm_
from ctpipe.components.engine.step import optimizer_step_unsynced
from ctpipe.components.engine.trainer import LOG_EVERY
from tests.fixtures.one_rank import one_rank_trainer

READS = ("item", "tolist", "__float__", "__bool__", "__int__")


class _HostReads:
    """Counts the host reads of tensors while it is active (every ``torch.Tensor`` method in ``READS``)."""

    def __init__(self, monkeypatch) -> None:
        self.count, self.active = 0, False
        for name in READS:
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, **kwargs):
                self.count += self.active
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(torch.Tensor, name, counted)


def _bare_step(model, optimizer, batch, loss_fn) -> None:
    """What a bare loop does per step: forward, loss, backward, clip by the global norm, AdamW."""
    inputs, targets = batch
    loss_fn(model(*inputs), targets).backward()
    clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_the_unsynced_step_reads_on_the_host_only_what_a_bare_step_reads(monkeypatch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    batch = ((torch.randn(16, 4),), torch.randint(0, 3, (16,)))
    _bare_step(model, optimizer, batch, torch.nn.functional.cross_entropy)  # AdamW's state exists from here on
    reads = _HostReads(monkeypatch)
    reads.active = True
    _bare_step(model, optimizer, batch, torch.nn.functional.cross_entropy)
    bare, reads.count = reads.count, 0
    loss, norm = optimizer_step_unsynced(model, [batch], optimizer, scheduler, accum=1, grad_clip=1.0)
    reads.active = False
    assert reads.count == bare
    assert loss.dim() == 0 and norm.dim() == 0 and float(norm) > 0


def test_the_trainer_reads_its_steps_on_the_host_once_per_boundary_not_once_per_step(tmp_path, monkeypatch):
    """Before: every step turned its loss and gradient norm into floats (two syncs a step) to check them and to
    count clipping; 40 steps read the device 80 times."""
    steps = ["train.max_steps=40", "train.eval_every=20", "train.checkpoint_every=40"]
    with one_rank_trainer(tmp_path, steps) as trainer:
        in_steps, in_settles = _HostReads(monkeypatch), 0
        stepped, settle = trainer.train_step, trainer._settle
        boundaries = []

        def counted_step():
            in_steps.active = True
            try:
                return stepped()
            finally:
                in_steps.active = False

        def counted_settle():
            nonlocal in_settles
            before = in_steps.count
            in_steps.active = True
            try:
                settle()
            finally:
                in_steps.active = False
            in_settles += in_steps.count - before
            in_steps.count = before
            boundaries.append(trainer.progress.step)

        def batch_on_the_host(device, _next=trainer.stream.next_batch):
            # The batch order is drawn on the host (the sampler's permutation), as any data loader's: not counted.
            active, in_steps.active = in_steps.active, False
            try:
                return _next(device)
            finally:
                in_steps.active = active

        monkeypatch.setattr(trainer, "train_step", counted_step)
        monkeypatch.setattr(trainer, "_settle", counted_settle)
        monkeypatch.setattr(trainer.stream, "next_batch", batch_on_the_host)
        result = trainer.run()
        in_trainer_steps, in_steps.count, in_steps.active = in_steps.count, 0, True
        _bare_step(trainer.model, trainer.optimizer, trainer.stream.next_batch(torch.device("cpu")),
                   trainer.task.objective.loss)
        in_steps.active = False
    assert result["steps"] == 40 and 0 <= result["clip_rate"] <= 1 and result["samples_per_second"] > 0
    assert in_trainer_steps == 40 * in_steps.count  # what a bare step reads (AdamW's own), nothing more
    assert boundaries == list(range(LOG_EVERY, 41, LOG_EVERY)) and in_settles == len(boundaries)  # one read each
