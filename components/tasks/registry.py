"""Resolve a run's task from config: the built-ins by name, the user's own by ``package.module:factory``.

    task = load_task(config.task)          # every step, and every trainer pod, calls this first

``BUILTIN_TASKS`` is the one place a built-in task is registered (as an import path, so the CLI does not
import torch to read it). A factory returns a ``TaskSpec`` (``spec.py``); one that returns a one-class task
(a ``TaskBase`` subclass) still works, turned into a spec with a deprecation warning (``legacy.py``). A
missing module, a factory that raises or returns an object lacking a required part is a ``TaskError``
naming what is missing, before any work.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable
from typing import Any

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.tasks.legacy import LegacyTaskError, spec_from_task_object
from ctpipe.components.tasks.protocol import Metric
from ctpipe.components.tasks.spec import TaskSpec

# name -> "module:factory" of the task; the factory takes the config's task.options as keyword arguments.
BUILTIN_TASKS: dict[str, str] = {
    "tabular_classification": "ctpipe.components.tasks.tabular:make_task",
    "causal_lm": "ctpipe.components.tasks.causal_lm:make_task",
    "tabular_regression": "ctpipe.components.tasks.regression:make_task",
}
DEFAULT_TASK = "tabular_classification"

_CACHE: dict[str, TaskSpec] = {}


class TaskError(ConfigError):
    """The configured task cannot be loaded or is incomplete; the message names what is missing."""


def task_record(settings: Any) -> dict[str, Any]:
    """What identifies a task (stored in exports and checkpoint indexes): name, entrypoint, options."""
    return {"name": settings.name, "entrypoint": settings.entrypoint, "options": dict(settings.options or {})}


def load_task(settings: Any) -> TaskSpec:
    """The task that ``settings`` (``config.task``, or a ``task_record`` dict) names, as a checked ``TaskSpec``."""
    record = settings if isinstance(settings, dict) else task_record(settings)
    key = json.dumps(record, sort_keys=True, default=str)
    if key not in _CACHE:
        _CACHE[key] = _resolve(record)
    return _CACHE[key]


def _resolve(record: dict[str, Any]) -> TaskSpec:
    entrypoint, name = record.get("entrypoint"), record.get("name") or DEFAULT_TASK
    if entrypoint:
        where = f"task.entrypoint '{entrypoint}'"
    else:
        if name not in BUILTIN_TASKS:
            raise TaskError(
                f"invalid config value for 'task.name': {name!r} is not a built-in task; built-ins: "
                f"{', '.join(sorted(BUILTIN_TASKS))}. For your own task set task.entrypoint=package.module:factory"
            )
        entrypoint, where = BUILTIN_TASKS[name], f"built-in task '{name}' ({BUILTIN_TASKS[name]})"
    factory = _import_factory(entrypoint, where)
    options = dict(record.get("options") or {})
    try:
        task = factory(**options)
    except Exception as err:  # the user's code: any error is theirs to see, with where it came from
        raise TaskError(
            f"{where}: calling the factory with task.options {options} raised {type(err).__name__}: {err}"
        ) from err
    return complete_task(task, where)


def _import_factory(entrypoint: str, where: str):
    module_name, _, attr = entrypoint.partition(":")
    if not module_name or not attr:
        raise TaskError(f"{where}: expected 'package.module:factory', got {entrypoint!r}")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        raise TaskError(
            f"{where}: module '{module_name}' cannot be imported ({err}). Install the package that holds it "
            "into the image (FROM ctpipe's image, see docs/your-model.md) or put it on PYTHONPATH"
        ) from err
    except Exception as err:
        raise TaskError(f"{where}: importing module '{module_name}' raised {type(err).__name__}: {err}") from err
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise TaskError(f"{where}: module '{module_name}' has no callable '{attr}'")
    return factory


def complete_task(task: Any, where: str = "the task") -> TaskSpec:
    """``task`` as a checked ``TaskSpec``: a spec as it is, a one-class task (``TaskBase``) turned into one (with
    TaskBase's defaults for the optional parts it lacks); TaskError naming what is missing or malformed."""
    if isinstance(task, TaskSpec):
        spec = task
    else:
        try:
            spec = spec_from_task_object(task, where)
        except LegacyTaskError as err:
            raise TaskError(str(err)) from None
    for metric in spec.scoring.metrics:
        _check_direction(metric, where)
    return spec


def _check_direction(metric: Metric, where: str) -> None:
    """TaskError when a metric's declared direction contradicts its name (the rule ``select.mode=auto`` reads:
    loss/error lower, accuracy/F1/AUC higher); a ``neg_`` name (sklearn's negated losses) says nothing."""
    from ctpipe.components.lib.config.gate_sections import metric_direction

    named = None if {"neg", "negative"} & set(metric.name.lower().split("_")) else metric_direction(metric.name)
    if named is not None and named != metric.direction:
        said, better = ("lower", "False") if named == "min" else ("higher", "True")
        raise TaskError(
            f"{where}: metric '{metric.name}' is declared higher_is_better={metric.higher_is_better}, but its name says "
            f"{said} is better: the blessing would prefer the worse model. Declare Metric('{metric.name}', "
            f"higher_is_better={better}), or rename the metric if it really is better the other way"
        )


def label_column(task: TaskSpec, data: Any) -> str | None:
    """The label column of a run: ``data.label`` (``config.data``), or None for a task that needs no label;
    ConfigError when the task needs one and ``data.label`` is null."""
    if not task.codec.needs_label:
        return None
    if data.label is None:
        raise ConfigError(f"invalid data.label=null: task '{task.name}' learns from a label column; name it with "
                          "--set data.label=COLUMN (null is for a task that needs no label, e.g. causal_lm)")
    return data.label


def check_evaluation_metrics(task: TaskSpec, evaluate: Any) -> None:
    """ConfigError unless every blessing rule and floor (``config.evaluate``) names one of ``task.metrics``.

    A rule on a metric the task never computes could only ever fail the blessing, after a whole training;
    the first step calls this so that it stops the run before any work, with the task's metrics named."""
    names = [m.name for m in task.scoring.metrics]
    unknown = [metric for metric in getattr(evaluate, "floors", {}) if metric not in names]
    if unknown:
        raise ConfigError(
            f"invalid config value for 'evaluate.floors.{unknown[0]}': task '{task.name}' computes no metric "
            f"{unknown[0]!r}; its metrics: {', '.join(names)}. Name those in evaluate.floors (e.g. --set "
            f"evaluate.floors.{names[0]}=...), or remove the floor"
        )
    for where, rules in (("evaluate.thresholds", evaluate.thresholds),
                         ("evaluate.slice_thresholds", evaluate.slice_thresholds)):
        unknown = [metric for metric in rules if metric not in names]
        if unknown:
            raise ConfigError(
                f"invalid config value for '{where}.{unknown[0]}': task '{task.name}' computes no metric "
                f"{unknown[0]!r}; its metrics: {', '.join(names)}. Name those in {where} (e.g. --set "
                f"{where}.{names[0]}.value=baseline), or remove the rule"
            )
        # The metric says which way it improves; a rule saying the other would bless the worse model.
        better = {m.name: m.higher_is_better for m in task.scoring.metrics}
        for metric, rule in rules.items():
            said = getattr(rule, "direction", "auto")
            if said != "auto" and (said == "higher") != better[metric]:
                raise ConfigError(
                    f"invalid config value for '{where}.{metric}.direction': {said!r} contradicts task "
                    f"'{task.name}', whose metric {metric!r} is better when {'higher' if better[metric] else 'lower'} "
                    f"(the blessing would prefer the worse model); use direction=auto"
                )
        # A task without a baseline gives no predictions: a 'baseline' floor could then never be met.
        if task.scoring.baseline is None:
            relative = [metric for metric, rule in rules.items() if getattr(rule, "value", None) == "baseline"]
            if relative:
                raise ConfigError(
                    f"invalid config value for '{where}.{relative[0]}.value': 'baseline' needs the task's trivial "
                    f"predictor, and task '{task.name}' has none (Scoring.baseline is None: it predicts nothing), "
                    f"so no model could ever pass it. Give the task a baseline(targets, state), or set an absolute "
                    f"bound, e.g. --set {where}.{relative[0]}.value=0.9"
                )


def check_selection_metric(task: TaskSpec, metric: str, row_metric_names: Iterable[str]) -> None:
    """ConfigError unless ``metric`` (``select.metric``) is one the trainer's validation reports: ``val_loss``
    and ``val_<name>`` for the task's ``row_metrics`` (``row_metric_names``, found by scoring one batch).

    Checkpoints are selected and kept by it, so a name validation never reports would fail only after the
    whole training ("finished without an evaluated checkpoint"); sanity and the trainer call this first."""
    reported = ["val_loss", *(f"val_{name}" for name in row_metric_names)]
    if metric not in reported:
        raise ConfigError(
            f"invalid config value for 'select.metric': {metric!r} is not reported by the validation of task "
            f"'{task.name}', which reports: {', '.join(reported)}. Checkpoints are selected and kept by this "
            "metric: set select.metric to one of those"
        )


def metric_directions(task: TaskSpec) -> dict[str, bool]:
    """Name -> True when higher is better, for the task's test metrics."""
    return {m.name: m.higher_is_better for m in task.scoring.metrics}
