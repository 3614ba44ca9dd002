"""The premise of the bit-identical tests (resume, re-run; ``tests/fixtures/exact.py``): at one thread, the
trainer's optimizer step needs no nondeterministic operation and repeats bit for bit.

The ranks cannot be put under ``torch.use_deterministic_algorithms`` (the worker has no setting for it), so the
step they run is checked here, in-process, under it: torch raises on an operation it knows to be
nondeterministic, and two trainings from the same seed must end with the same weights' hash.
"""

from __future__ import annotations

import pytest
import torch

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.engine.step import build_optimizer, optimizer_step
from ctpipe.components.lib.config import ModelConfig, TrainConfig
from ctpipe.components.lib.models.tabular import InputSpec, build_model
from tests.fixtures.exact import deterministic_torch

STEPS = 6


def _tabular(kind: str):
    spec = InputSpec(n_numeric=5, cardinalities=[4, 7], n_classes=3)
    generator = torch.Generator().manual_seed(0)
    x_num = torch.randn(64, 5, generator=generator)
    x_cat = torch.stack([torch.randint(0, 4, (64,), generator=generator),
                         torch.randint(0, 7, (64,), generator=generator)], dim=1)
    y = torch.randint(0, 3, (64,), generator=generator)
    model = build_model(ModelConfig(kind=kind, hidden=16, depth=2, heads=2, dropout=0.1), spec)
    return model, ((x_num, x_cat), y), torch.nn.functional.cross_entropy


def _causal_lm(_kind: str):
    from ctpipe.components.tasks.causal_lm import make_task
    from ctpipe.components.tasks.causal_lm.corpus import help_topic_documents

    task = make_task(dropout=0.1)
    docs = help_topic_documents().iloc[:16]
    state = task.codec.fit(docs, None)
    batch = task.codec.encode(docs, state)
    part = batch.select(torch.arange(min(8, len(batch))))
    return task.model.build(None, state), (part.inputs, part.targets), task.objective.loss


def _trained_weights_sha256(build, kind: str) -> str:
    torch.manual_seed(1234)
    model, (inputs, targets), loss_fn = build(kind)
    optimizer, scheduler = build_optimizer(model, TrainConfig(max_steps=STEPS, warmup_steps=1))
    model.train()
    for _ in range(STEPS):
        result = optimizer_step(model, [(inputs, targets)], optimizer, scheduler, accum=1, grad_clip=1.0,
                                loss_fn=loss_fn)
        assert result.finite
    return ckpt.state_dict_sha256(model.state_dict())


@pytest.mark.parametrize(("build", "kind"), [(_tabular, "mlp"), (_tabular, "transformer"), (_causal_lm, "tiny")],
                         ids=["mlp", "transformer", "causal_lm"])
def test_the_trainers_step_is_deterministic_at_one_thread(build, kind):
    with deterministic_torch():
        assert torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 1
        first, second = (_trained_weights_sha256(build, kind) for _ in range(2))
    assert first == second


def test_the_switch_and_the_thread_count_are_restored():
    torch.set_num_threads(2)  # not the one thread deterministic_torch sets: a missed restore shows
    with deterministic_torch():
        pass
    assert not torch.are_deterministic_algorithms_enabled() and torch.get_num_threads() == 2


def test_tests_run_torch_on_one_thread_whatever_the_machines_cores():
    """tests/conftest.py pins it: the tiny models the tests train in this process give the same numbers on a
    2-core laptop and a 64-core runner (a reduction split over more threads changes its last bits)."""
    assert torch.get_num_threads() == 1
