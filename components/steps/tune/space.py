"""The trials of a search: points of the space (quasi-random, random or a grid), each checked as a whole config.

Quasi-random is a scrambled Sobol sequence from ``scipy.stats.qmc`` (what Optuna's ``QMCSampler`` wraps): its
points fill the unit cube more evenly than independent draws, so a small budget leaves no large region of the
space untried, and unlike a grid every trial tries a new value of every hyperparameter. A point ``u`` in
[0, 1)^d maps to each dimension on its own scale (log for log ranges). Trial 0 is the configured values
(``tune.baseline_trial``): the search is judged against the config as given, on the same budget.

``plan_search`` returns the trials after every one of them, and each end of each range, has been resolved as a
run config (``components/run_config/trial.py``): a space that can make an invalid config is refused, naming the
setting, before any trial starts.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ctpipe.components.lib.config import Config, SearchDimension
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config.trial import trial_config, trial_settings

# Significant digits of a sampled number: values that read back exactly from their text (env, reports).
DIGITS = 6


@dataclass(frozen=True)
class TrialPlan:
    """One trial: its index, its values (config key -> value) and whether it is the configured values."""

    index: int
    values: dict[str, Any] = field(default_factory=dict)
    baseline: bool = False


@dataclass(frozen=True)
class SearchPlan:
    """The config every trial starts from (the per-trial budget applied) and the trials."""

    base: Config
    trials: list[TrialPlan]


def value_at(dimension: SearchDimension, u: float) -> Any:
    """The value of ``dimension`` at ``u`` in [0, 1) on its own scale."""
    if dimension.kind == "choice":
        return dimension.values[min(int(u * len(dimension.values)), len(dimension.values) - 1)]
    low, high = float(dimension.low), float(dimension.high)  # type: ignore[arg-type]
    if dimension.integer:
        top = high + 1  # each whole number gets an equal share of [0, 1)
        x = math.exp(math.log(low) + u * (math.log(top) - math.log(low))) if dimension.log else low + u * (top - low)
        return int(min(max(math.floor(x), low), high))
    x = math.exp(math.log(low) + u * (math.log(high) - math.log(low))) if dimension.log else low + u * (high - low)
    return min(max(float(f"{x:.{DIGITS}g}"), low), high)


def position(dimension: SearchDimension, value: Any) -> float | None:
    """Where ``value`` lies in a numeric range, 0 at ``low`` and 1 at ``high`` on its scale (None for a choice)."""
    if dimension.kind == "choice" or not isinstance(value, int | float) or isinstance(value, bool):
        return None
    low, high = float(dimension.low), float(dimension.high)  # type: ignore[arg-type]
    if dimension.log:
        return (math.log(value) - math.log(low)) / (math.log(high) - math.log(low)) if value > 0 else None
    return (value - low) / (high - low)


def unit_points(sampler: str, count: int, dims: int, seed: int) -> np.ndarray:
    """``count`` points in [0, 1)^dims: a scrambled Sobol sequence, or independent uniform draws."""
    if count <= 0:
        return np.zeros((0, dims))
    if sampler == "quasi_random":
        from scipy.stats import qmc

        # The first 2^m points keep Sobol's balance; the first ``count`` of them are as even as a prefix can be.
        sobol = qmc.Sobol(d=dims, scramble=True, seed=seed)
        return sobol.random_base2(m=max(0, math.ceil(math.log2(count))))[:count]
    return np.random.default_rng(seed).random((count, dims))


def grid_values(dimension: SearchDimension, points: int) -> list[Any]:
    """A dimension's grid: its choices, or ``points`` values evenly spaced on its scale (each whole number once)."""
    if dimension.kind == "choice":
        return list(dimension.values)
    values = [value_at(dimension, min(i / (points - 1), 1 - 1e-12)) for i in range(points)]
    if not dimension.integer:
        values[-1] = float(dimension.high)  # type: ignore[arg-type]
    return list(dict.fromkeys(values))


def sampled_values(config: Config, count: int) -> list[dict[str, Any]]:
    """``count`` points of ``config.tune.space`` by ``tune.sampler`` (a grid larger than ``count``: a seeded
    random subset of it, in grid order)."""
    tune = config.tune
    dims = tune.dimensions()
    keys = list(dims)
    if tune.sampler == "grid":
        grid = list(itertools.product(*(grid_values(dims[k], tune.grid_points) for k in keys)))
        if len(grid) > count:
            chosen = sorted(np.random.default_rng(tune.seed).choice(len(grid), size=count, replace=False).tolist())
            grid = [grid[i] for i in chosen]
        return [dict(zip(keys, point, strict=True)) for point in grid]
    points = unit_points(tune.sampler, count, len(keys), tune.seed)
    return [{k: value_at(dims[k], float(u)) for k, u in zip(keys, row, strict=True)} for row in points]


def configured_values(config: Config) -> dict[str, Any]:
    """The configured value of each key of the space (a task option the config leaves to the task's factory:
    left out, so the trial runs the factory's default)."""
    values = config.to_dict()
    out: dict[str, Any] = {}
    for key in config.tune.space:
        node: Any = values
        for part in key.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            out[key] = node
    return out


_MISSING = object()


def trial_budget(config: Config) -> Config:
    """The config every trial starts from: ``tune.trial_steps`` optimiser steps (warm-up scaled with them), the
    ``tune.trial_seconds`` deadline, one checkpoint kept, and no record of an earlier search."""
    tune, train = config.tune, config.train
    steps = tune.trial_steps or train.max_steps
    settings = {
        "train.max_steps": steps,
        "train.warmup_steps": min(train.warmup_steps * steps // train.max_steps, steps - 1),
        "train.deadline_seconds": tune.trial_seconds or train.deadline_seconds,
        "train.keep_best": 1,
        "tune.chosen": "{}",
    }
    try:
        return trial_config(config, settings)
    except ConfigError as err:
        raise ConfigError(f"tune.trial_steps/tune.trial_seconds: the per-trial budget makes an invalid config: {err}") from None


def plan_search(config: Config) -> SearchPlan:
    """The trials of ``config.tune``, each checked as a whole run config; a ``ConfigError`` names what breaks."""
    tune = config.tune
    base = trial_budget(config)
    dims = tune.dimensions()
    for key, dimension in dims.items():
        ends = dimension.values if dimension.kind == "choice" else [value_at(dimension, 0.0), value_at(dimension, 1 - 1e-12)]
        for value in ends:
            _check(base, {key: value}, f"tune.space.{key}: {dimension.text()} reaches {key}={value}, which makes an "
                                       "invalid config")
    trials = [TrialPlan(0, configured_values(config), baseline=True)] if tune.baseline_trial else []
    for values in sampled_values(config, tune.trials - len(trials)):
        trials.append(TrialPlan(len(trials), values))
    tasks_checked: set[str] = set()
    for trial in trials:
        resolved = _check(base, trial.values, f"tune.space: trial {trial.index} ({', '.join(trial_settings(trial.values))}) "
                                              "makes an invalid config")
        _check_task(resolved, trial, tasks_checked)
    return SearchPlan(base=base, trials=trials)


def _check(base: Config, values: dict[str, Any], what: str) -> Config:
    try:
        return trial_config(base, values)
    except ConfigError as err:
        raise ConfigError(f"{what}: {err}; narrow tune.space so that every trial is a valid config") from None


def _check_task(config: Config, trial: TrialPlan, seen: set[str]) -> None:
    """A trial's task options must make a task (the factory takes them): checked once per set of options."""
    key = repr(sorted(config.task.options.items()))
    if not any(k.startswith("task.options.") for k in trial.values) or key in seen:
        return
    seen.add(key)
    from ctpipe.components.tasks import load_task

    try:
        load_task(config.task)
    except Exception as err:  # the task factory's own refusal, whatever its type
        raise ConfigError(f"tune.space: trial {trial.index} ({', '.join(trial_settings(trial.values))}) makes no task: "
                          f"{type(err).__name__}: {err}; narrow the task.options ranges of tune.space") from None
