"""Tasks written for the one-class protocol (a ``TaskBase`` subclass, or any object with its methods) as specs.

    spec = spec_from_task_object(MyTask(), "task.entrypoint 'my_pkg:make_task'")   # FutureWarning once per class

Such a task keeps working unchanged: its methods become the parts of a ``TaskSpec`` (``spec.py``), its
missing optional parts get ``TaskBase``'s defaults. The one-line migration (docs/task-protocol.md) is to
return ``task_spec(MyTask())`` from the factory, or to build the ``TaskSpec`` directly.
"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ctpipe.components.tasks.protocol import REQUIRED_PARTS, Metric, TaskBase
from ctpipe.components.tasks.spec import (
    DataCodec,
    DataProfile,
    Demo,
    ModelParts,
    Objective,
    SanityChecks,
    Scoring,
    Serving,
    SpecError,
    TaskSpec,
    trivial_predictions,
)

_WARNED: set[type] = set()


class LegacyTaskError(ValueError):
    """The object is not a complete one-class task; the message names what is missing."""


def spec_from_task_object(task: Any, where: str = "the task", *, warn: bool = True) -> TaskSpec:
    """The ``TaskSpec`` of a one-class task ``task``; ``LegacyTaskError`` naming what is missing or malformed."""
    if isinstance(task, type):  # a class has every method, but unbound: the first call would fail obscurely
        raise LegacyTaskError(
            f"{where} returned the class {task.__name__}, not an instance of it: the factory must return a task "
            f"object, e.g. return {task.__name__}(...)"
        )
    missing = [part for part in REQUIRED_PARTS if getattr(task, part, None) is None]
    if missing:
        raise LegacyTaskError(
            f"{where} returned {type(task).__name__}, which lacks the required part(s) {', '.join(missing)} "
            "of the task protocol (a TaskSpec, or the methods of components/tasks/protocol.py: Task)"
        )
    not_callable = [p for p in REQUIRED_PARTS if p not in ("name", "metrics", "sanity") and not callable(getattr(task, p))]
    if not_callable:
        raise LegacyTaskError(f"{where}: {', '.join(not_callable)} must be method(s) of the task")
    metrics = list(task.metrics)
    if not metrics or not all(isinstance(m, Metric) for m in metrics):
        raise LegacyTaskError(f"{where}: 'metrics' must be a non-empty sequence of Metric(name, higher_is_better)")
    if warn and type(task) not in _WARNED:
        _WARNED.add(type(task))
        warnings.warn(
            f"{where}: {type(task).__name__} is a one-class task (TaskBase, deprecated); it keeps working. Return "
            "ctpipe.task.task_spec(YourTask()) from the factory, or build a TaskSpec of parts: docs/task-protocol.md",
            FutureWarning, stacklevel=3)

    settings = getattr(task, "config_defaults", ())
    if not isinstance(settings, tuple | list) or not all(isinstance(s, str) and "=" in s for s in settings):
        raise LegacyTaskError(f"{where}: 'config_defaults' must be a tuple of 'section.key=value' strings (as for "
                              f"--set), got {settings!r}")
    for switch in ("needs_label", "rowwise_encoding"):
        if not isinstance(getattr(task, switch, False), bool):
            raise LegacyTaskError(f"{where}: '{switch}' must be True or False, got {getattr(task, switch)!r}")
    if getattr(task, "label_kind", "classes") not in ("classes", "continuous"):
        raise LegacyTaskError(f"{where}: 'label_kind' must be 'classes' or 'continuous', got {task.label_kind!r}")
    if isinstance(task, SpecTask):  # a spec's task with some members overridden
        try:
            return _spec_with_overrides(task)
        except SpecError as err:
            raise LegacyTaskError(f"{where}: {err}") from None
    if callable(getattr(task, "spec", None)):  # a built-in's implementation, or a user's subclass of one
        try:
            return task.spec()
        except SpecError as err:
            raise LegacyTaskError(f"{where}: {err}") from None

    def part(name: str) -> Any:
        """The task's own optional part, else TaskBase's default (a method bound to the task, or a value)."""
        if hasattr(task, name):
            return getattr(task, name)
        default = getattr(TaskBase, name)
        return types.MethodType(default, task) if callable(default) else default

    def own(name: str) -> bool:
        return defines_itself(task, name)

    demo = part("write_demo_data")
    try:
        return TaskSpec(
            name=task.name,
            codec=DataCodec(fit=task.fit, encode=task.encode, targets=task.targets, fit_streamed=part("fit_streamed"),
                            target_columns=part("target_columns"), rowwise=part("rowwise_encoding"),
                            needs_label=part("needs_label"), label_kind=part("label_kind"),
                            key_column=part("key_column")),
            model=ModelParts(build=task.build_model, shard_units=task.shard_units, init=part("init_model"),
                             describe=task.describe_model if own("describe_model") else None),
            objective=Objective(loss=task.loss, row_losses=task.row_losses, row_metrics=task.row_metrics),
            scoring=Scoring(metrics=tuple(metrics), predict=task.predict, compute_metrics=task.compute_metrics,
                            baseline=task.baseline if own("baseline") else None, baseline_name=part("baseline_name"),
                            paired_bootstrap=task.paired_bootstrap if own("paired_bootstrap") else None,
                            unit_sums=part("unit_sums"), class_names=part("class_names")),
            checks=SanityChecks(init_losses=task.init_losses, sanity=task.sanity, strata=part("strata"),
                                describe_batch=part("describe_batch"), batch_mismatches=part("batch_mismatches"),
                                extra_checks=part("extra_checks")),
            serving=Serving(serve=task.serve),
            profile=DataProfile(own_columns=part("own_columns"), expectations=part("expectations"),
                                check_columns=part("check_columns"), drift_columns=part("drift_columns"),
                                drift_histograms=part("drift_histograms")),
            defaults=tuple(part("config_defaults")),
            demo=Demo(write_data=demo, settings=tuple(part("demo_settings"))) if demo is not None else None,
        )
    except SpecError as err:
        raise LegacyTaskError(f"{where}: {err}") from None



def defines_itself(task: Any, name: str) -> bool:
    """Whether a one-class ``task`` has ``name`` of its own, not ``TaskBase``'s default (a baseline that predicts
    nothing is no baseline)."""
    found = getattr(type(task), name, None)
    return hasattr(task, name) and found is not getattr(TaskBase, name, None)


def task_spec(task: Any) -> TaskSpec:
    """A one-class task as a ``TaskSpec``, without the deprecation warning: the one-line migration of a factory
    that returns a ``TaskBase`` subclass (``return task_spec(MyTask())``). A spec is returned as it is."""
    if isinstance(task, TaskSpec):
        return task
    return spec_from_task_object(task, f"task_spec({type(task).__name__})", warn=False)


# The one-class protocol's names and where each lives in a spec: (part, member); a part of None is the spec's own.
ONE_CLASS_NAMES: dict[str, tuple[str | None, str]] = {
    "name": (None, "name"), "config_defaults": (None, "defaults"),
    "fit": ("codec", "fit"), "encode": ("codec", "encode"), "targets": ("codec", "targets"),
    "fit_streamed": ("codec", "fit_streamed"), "target_columns": ("codec", "target_columns"),
    "rowwise_encoding": ("codec", "rowwise"), "needs_label": ("codec", "needs_label"),
    "label_kind": ("codec", "label_kind"), "key_column": ("codec", "key_column"),
    "build_model": ("model", "build"), "shard_units": ("model", "shard_units"), "init_model": ("model", "init"),
    "describe_model": ("model", "describe"),
    "loss": ("objective", "loss"), "row_losses": ("objective", "row_losses"), "row_metrics": ("objective", "row_metrics"),
    "metrics": ("scoring", "metrics"), "predict": ("scoring", "predict"), "compute_metrics": ("scoring", "compute_metrics"),
    "baseline": ("scoring", "baseline"), "baseline_name": ("scoring", "baseline_name"),
    "paired_bootstrap": ("scoring", "paired_bootstrap"), "unit_sums": ("scoring", "unit_sums"),
    "class_names": ("scoring", "class_names"),
    "sanity": ("checks", "sanity"), "init_losses": ("checks", "init_losses"), "strata": ("checks", "strata"),
    "describe_batch": ("checks", "describe_batch"), "batch_mismatches": ("checks", "batch_mismatches"),
    "extra_checks": ("checks", "extra_checks"),
    "serve": ("serving", "serve"),
    "own_columns": ("profile", "own_columns"), "expectations": ("profile", "expectations"),
    "check_columns": ("profile", "check_columns"), "drift_columns": ("profile", "drift_columns"),
    "drift_histograms": ("profile", "drift_histograms"),
}


class SpecTask(TaskBase):
    """A spec seen as a one-class task, so that code written for the old class can subclass a spec's task and
    override one method (``super()`` reaching the spec's own): the held-out style of injecting a bug into a
    user's task. ``task_class(make_task)`` makes the class; its instances become specs again in
    ``load_task``, with exactly the overridden members replaced."""

    factory: Callable[..., TaskSpec]

    def __init__(self, **options: Any) -> None:
        self._spec = type(self).factory(**options)


def _member(spec: TaskSpec, name: str) -> Any:
    part, member = ONE_CLASS_NAMES[name]
    if name == "describe_model":
        return spec.describe_model
    if name == "paired_bootstrap":
        return spec.scoring.bootstrap
    if name == "baseline":
        return lambda targets, state: trivial_predictions(spec.scoring, targets, state)
    return getattr(spec if part is None else getattr(spec, part), member)


# Every one-class name reads the spec's member (``super().predict(...)`` in a subclass included).
for _name in ONE_CLASS_NAMES:
    setattr(SpecTask, _name, property(lambda self, _n=_name: _member(self._spec, _n)))


def task_class(factory: Callable[..., TaskSpec]) -> type[SpecTask]:
    """A one-class task class whose instances are ``factory(**options)``'s spec: the one-line migration of code
    that subclassed the class a factory's task had (``DigitsTask = type(make_task())`` becomes
    ``DigitsTask = task_class(make_task)``)."""
    return type(f"{getattr(factory, '__name__', 'task')}_class", (SpecTask,), {"factory": staticmethod(factory)})


def with_members(spec: TaskSpec, **members: Any) -> TaskSpec:
    """``spec`` with members replaced, named as the one-class protocol names them (``predict=...`` replaces
    ``scoring.predict``): a variant of a task, e.g. one with a bug injected, in one call."""
    for name, value in members.items():
        if name not in ONE_CLASS_NAMES:
            raise SpecError(f"{name!r} is no member of a task; the members: {', '.join(ONE_CLASS_NAMES)}")
        part, member = ONE_CLASS_NAMES[name]
        if part is None:
            spec = replace(spec, **{member: value})
        else:
            spec = replace(spec, **{part: replace(getattr(spec, part), **{member: value})})
    return spec


def _spec_with_overrides(task: SpecTask) -> TaskSpec:
    """The spec of a SpecTask subclass's instance: the spec, with the members its class overrides replaced."""
    overridden = {name for name in ONE_CLASS_NAMES for cls in type(task).__mro__
                  if issubclass(cls, SpecTask) and cls is not SpecTask and name in vars(cls)}
    return with_members(task._spec, **{name: getattr(task, name) for name in overridden})
