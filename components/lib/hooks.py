"""Hook points for code from outside the pipeline, loaded only when ``CTPIPE_HOOKS`` names it.

    CTPIPE_HOOKS=my_package.hooks:MyHooks ctpipe run     # MyHooks() answers the hook points of every step

The pipeline calls a few named points: around a step's whole run and at the commit points of a registration
(``StepHooks``), and at a training rank's steps and saves (``ctpipe.components.engine.hooks.TrainingHooks``).
Unset, every point is a no-op and nothing is imported. Set, ``module:object`` is imported with importlib (as
``task.entrypoint`` is) and called once per ``load_hooks``; what it returns answers the points of the base
classes it subclasses, and the others stay no-ops.

ctpipe's own tests and benchmarks inject faults this way (``ctpipe.testing.faults``, never imported by the
pipeline). Their variables (``CTPIPE_TEST_FAULT``, ``CTPIPE_TEST_STEP_FAULT``, ``CTPIPE_TEST_REGISTRATION_FAULT``)
name those hooks by themselves, so a fault set alone, as the tests, the fake cluster and the soak set it, fires.
"""

from __future__ import annotations

import importlib
import os
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

HOOKS_ENV = "CTPIPE_HOOKS"
# The fault injection of ctpipe's tests: a name to load, not an import (the pipeline never imports ctpipe.testing).
TEST_FAULT_HOOKS = "ctpipe.testing.faults:FaultHooks"
TEST_FAULT_ENVS = ("CTPIPE_TEST_FAULT", "CTPIPE_TEST_STEP_FAULT", "CTPIPE_TEST_REGISTRATION_FAULT")

H = TypeVar("H")


class StepHooks:
    """The hook points of a pipeline step; each does nothing unless a loaded subclass says otherwise."""

    def running(self, step: str) -> AbstractContextManager[None]:
        """Held around step ``step``'s whole run, the recording of its outcome included (``step_status``)."""
        return nullcontext()

    def at(self, point: str) -> None:
        """Called at a named point of a step's work: a registration's ``after_artifacts``, ``after_create``,
        ``in_promotion_lock`` and ``after_alias`` (``components/lib/registry/``, ``steps/register/register.py``)."""


def hooks_spec() -> str | None:
    """The ``module:object`` to load: ``CTPIPE_HOOKS``, else the test faults when one of their variables is set."""
    spec = os.environ.get(HOOKS_ENV, "").strip()
    if spec:
        return spec
    return TEST_FAULT_HOOKS if any(os.environ.get(name) for name in TEST_FAULT_ENVS) else None


def load_hooks(base: type[H]) -> H:
    """The hooks ``hooks_spec`` names, when they subclass ``base``; else ``base()``, whose points do nothing."""
    spec = hooks_spec()
    if spec is None:
        return base()
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"{HOOKS_ENV}={spec!r}: expected 'module:object' (an importable module and a callable in it)")
    hooks = getattr(importlib.import_module(module_name), name)()
    return hooks if isinstance(hooks, base) else base()


def hook_point(point: str) -> None:
    """``StepHooks.at(point)`` of the loaded hooks (nothing while none are named)."""
    load_hooks(StepHooks).at(point)
