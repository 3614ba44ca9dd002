"""The hook points (components/lib/hooks.py, components/engine/hooks.py): no-ops unless CTPIPE_HOOKS (or a test
fault's own variable) names hooks, which are then loaded by name, never imported by the pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ctpipe.components.engine.hooks import TrainingHooks, training_hooks
from ctpipe.components.lib.hooks import HOOKS_ENV, TEST_FAULT_ENVS, StepHooks, hook_point, load_hooks
from ctpipe.testing.faults import FaultHooks


@pytest.fixture(autouse=True)
def no_hooks(monkeypatch):
    for name in (HOOKS_ENV, *TEST_FAULT_ENVS):
        monkeypatch.delenv(name, raising=False)


class OnlyStepHooks(StepHooks):
    def at(self, point: str) -> None:
        raise RuntimeError(f"hooked at {point}")


def test_unset_every_point_is_a_no_op():
    assert type(load_hooks(StepHooks)) is StepHooks and type(training_hooks()) is TrainingHooks
    hooks = training_hooks()
    loss = object()
    assert hooks.loss_fn(3, 0, loss) is loss and hooks.before_marker(3, 0) is None
    hook_point("after_alias")
    with load_hooks(StepHooks).running("register"):
        pass


def test_unset_nothing_is_imported():
    code = ("import sys; from ctpipe.components.lib.hooks import hook_point, load_hooks, StepHooks; "
            "from ctpipe.components.engine.hooks import training_hooks; training_hooks(); hook_point('x'); "
            "assert not [m for m in sys.modules if m.startswith('ctpipe.testing')], sorted(sys.modules)")
    env = {k: v for k, v in os.environ.items() if k not in (HOOKS_ENV, *TEST_FAULT_ENVS)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


def test_named_hooks_answer_the_points_of_the_bases_they_subclass(monkeypatch):
    monkeypatch.setenv(HOOKS_ENV, f"{__name__}:OnlyStepHooks")
    with pytest.raises(RuntimeError, match="hooked at after_create"):
        hook_point("after_create")
    assert type(training_hooks()) is TrainingHooks  # not training hooks: the rank's points stay no-ops


@pytest.mark.parametrize("spec", ["no_colon", ":Hooks", "module:"])
def test_a_malformed_spec_is_refused_by_name(monkeypatch, spec):
    monkeypatch.setenv(HOOKS_ENV, spec)
    with pytest.raises(ValueError, match="expected 'module:object'"):
        load_hooks(StepHooks)


@pytest.mark.parametrize("variable", TEST_FAULT_ENVS)
def test_a_test_fault_alone_loads_the_fault_hooks(monkeypatch, variable):
    monkeypatch.setenv(variable, "nan@999")
    assert isinstance(load_hooks(StepHooks), FaultHooks) and isinstance(training_hooks(), FaultHooks)


def test_the_fault_hooks_fire_what_their_variable_names(monkeypatch):
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "raise@2:1")
    hooks = training_hooks()
    hooks.before_step(2, 0)  # another rank
    with pytest.raises(RuntimeError, match="injected failure on rank 1 at step 2"):
        hooks.before_step(2, 1)
