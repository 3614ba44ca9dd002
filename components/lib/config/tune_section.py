"""The config section of hyperparameter tuning (``tune``): the search space, the sampler, the budgets.

Off by default (``trials: 0``): the pipeline then has no tune step at all. With ``trials > 0`` a tune step
between the sanity gate and training runs that many trials, each a real training job, and hands training
the configuration whose validation metric (``select.metric``) was best. A dimension of the space is given
as a mapping or as one text::

    tune:
      trials: 8
      space:
        train.lr: log_uniform(1e-4, 1e-1)          # or {kind: log_uniform, low: 1e-4, high: 1e-1}
        train.weight_decay: uniform(0, 0.1)
        task.options.width: choice(32, 64, 128)
      scientific: [task.options.width]             # the rest of the space is nuisance
      fixed: [train.batch_size]                    # held at the configured value, shown in the report

Whether every trial makes a valid run config is checked against the whole config by the tune step
(``components/steps/tune/space.py``, through the resolver) before any trial starts.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ctpipe.components.lib.config.rules import MAX_STEPS, MAX_WAIT_SECONDS, check, check_range
from ctpipe.components.lib.config.run_sections import ModelConfig, TrainConfig

DIMENSION_KINDS = ("uniform", "log_uniform", "int", "log_int", "choice")
# The training settings a search may vary: optimisation, not the job's shape or infrastructure (workers,
# backend, deadlines, checkpoint cadence). The trial's length is tune.trial_steps, not train.max_steps.
TUNABLE_TRAIN_KEYS = ("lr", "weight_decay", "warmup_steps", "min_lr_ratio", "grad_clip", "batch_size",
                      "grad_accum_steps", "seed")
DEFAULT_SPACE = {"train.lr": "log_uniform(1e-4, 1e-1)", "train.weight_decay": "log_uniform(1e-5, 1e-1)"}
MAX_TRIALS = 100  # as Kubeflow Trainer's OptimizationJob (numTrials) allows
MAX_CHOICES = 100
_TEXT_FORM = re.compile(r"^\s*([a-z_]+)\s*\((.*)\)\s*$", re.DOTALL)
_OPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(kw_only=True)
class SearchDimension:
    """One hyperparameter's range: uniform, log-uniform or integer between ``low`` and ``high``, or a choice."""

    kind: Literal["uniform", "log_uniform", "int", "log_int", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[Any] = field(default_factory=list)

    @property
    def log(self) -> bool:
        """Whether the range is searched (and plotted) on a log scale."""
        return self.kind in ("log_uniform", "log_int")

    @property
    def integer(self) -> bool:
        return self.kind in ("int", "log_int")

    def check(self, where: str) -> None:
        """Raise ``ConfigError`` naming ``where`` (``tune.space.train.lr``) unless the range is well formed."""
        if self.kind == "choice":
            check(self.low is None and self.high is None, where, "a choice takes values, not low/high")
            check(1 <= len(self.values) <= MAX_CHOICES, where, f"a choice needs 1 to {MAX_CHOICES} values")
            check(all(isinstance(v, str | int | float | bool) for v in self.values), where,
                  f"choice values must be numbers, text or booleans, got {self.values!r}")
            check(len({repr(v) for v in self.values}) == len(self.values), where, f"{self.values!r} repeats a value")
            return
        check(not self.values, where, f"a {self.kind} range takes low and high, not values")
        check(self.low is not None and self.high is not None, where, f"a {self.kind} range needs low and high")
        low, high = float(self.low), float(self.high)  # type: ignore[arg-type]
        check(math.isfinite(low) and math.isfinite(high) and low < high, where,
              f"needs finite low < high, got low={self.low!r}, high={self.high!r}")
        if self.log:
            check(low > 0, where, f"a log range needs low > 0, got {self.low!r}")
        if self.integer:
            check(low.is_integer() and high.is_integer(), where,
                  f"an integer range needs whole bounds, got low={self.low!r}, high={self.high!r}")

    def text(self) -> str:
        """The dimension as the one-line text form, e.g. ``log_uniform(0.0001, 0.1)``."""
        if self.kind == "choice":
            return f"choice({', '.join(str(v) for v in self.values)})"
        fmt = (lambda v: str(int(v))) if self.integer else (lambda v: f"{v:g}")
        return f"{self.kind}({fmt(self.low)}, {fmt(self.high)})"


def parse_dimension(text: str, where: str) -> SearchDimension:
    """``log_uniform(1e-4, 0.1)``, ``uniform(0, 1)``, ``int(16, 256)``, ``log_int(16, 256)``, ``choice(a, b)``."""
    found = _TEXT_FORM.match(text)
    check(found is not None and found.group(1) in DIMENSION_KINDS, where,
          f"{text!r} is not a range; write one of {', '.join(k + '(...)' for k in DIMENSION_KINDS)}, e.g. "
          "log_uniform(1e-4, 1e-1) or choice(32, 64)")
    assert found is not None
    kind, items = found.group(1), [_scalar(t) for t in found.group(2).split(",") if t.strip()]
    if kind == "choice":
        return SearchDimension(kind="choice", values=items)
    check(len(items) == 2 and all(isinstance(v, int | float) and not isinstance(v, bool) for v in items), where,
          f"{text!r}: {kind}(...) takes two numbers, low and high")
    return SearchDimension(kind=kind, low=float(items[0]), high=float(items[1]))  # type: ignore[arg-type]


def _scalar(token: str) -> Any:
    token = token.strip()
    for kind in (int, float):
        try:
            return kind(token)
        except ValueError:
            pass
    if token.lower() in ("true", "false"):
        return token.lower() == "true"
    return token.strip("'\"")


def check_tunable_key(key: str, where: str) -> None:
    """A key the space may vary: ``train.<optimisation setting>``, ``model.<field>`` or ``task.options.<name>``."""
    parts = key.split(".")
    allowed = (f"train.{{{', '.join(TUNABLE_TRAIN_KEYS)}}}, model.{{{', '.join(f.name for f in dataclasses.fields(ModelConfig))}}}"
               " or task.options.<name>")
    if parts[0] == "train" and len(parts) == 2:
        check(parts[1] in TUNABLE_TRAIN_KEYS, where,
              f"'{key}' is not tunable" + (" (its job shape, infrastructure or budget; a trial's length is "
                                           "tune.trial_steps)" if parts[1] in _field_names(TrainConfig) else "")
              + f"; tunable: {allowed}")
    elif parts[0] == "model" and len(parts) == 2:
        check(parts[1] in _field_names(ModelConfig), where, f"'{key}' is no model setting; tunable: {allowed}")
    elif parts[:2] == ["task", "options"] and len(parts) == 3:
        check(bool(_OPTION_NAME.fullmatch(parts[2])), where, f"'{key}': an option name is an identifier")
    else:
        check(False, where, f"'{key}' cannot be searched; tunable: {allowed}")


def _field_names(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


@dataclass(kw_only=True)
class TuneConfig:
    """Hyperparameter search before training: quasi-random trials, each a training job, judged on validation."""

    # Trials to run (0: no tune step in the pipeline; fixed when the pipeline is compiled).
    trials: int = 0
    # quasi_random: a scrambled Sobol sequence (scipy.stats.qmc), which covers the space more evenly than
    # random draws; random: independent uniform draws; grid: the grid of choices and grid_points per range.
    sampler: Literal["quasi_random", "random", "grid"] = "quasi_random"
    # Config key -> its range (a mapping or text, module docstring). The default searches the optimiser's two
    # nuisance hyperparameters, the learning rate first; a space given whole replaces it.
    space: dict[str, SearchDimension | str] = field(default_factory=lambda: dict(DEFAULT_SPACE))
    # Keys of the space whose effect the search is to measure; the rest of the space is nuisance.
    scientific: list[str] = field(default_factory=list)
    # Config keys held at their configured value (reported beside the space).
    fixed: list[str] = field(default_factory=list)
    # Trials that run at once (local: processes of train.workers ranks each; cluster: jobs).
    parallel_trials: int = 1
    # Failed trials (crashed, timed out; a diverged one is not a failure) after which the search stops;
    # None: a quarter of the trials, at least one.
    max_failed_trials: int | None = None
    # Optimiser steps of one trial; None: train.max_steps (a full budget, whose best checkpoint can be kept).
    trial_steps: int | None = None
    # A trial's deadline; None: train.deadline_seconds.
    trial_seconds: int | None = None
    # No trial starts after this many seconds of the search and running ones are stopped; None: no limit.
    total_seconds: int | None = None
    seed: int = 0
    # Points per uniform/log/int range under the grid sampler.
    grid_points: int = 3
    # Trial 0 trains the configured values, so the chosen configuration is never worse on validation.
    baseline_trial: bool = True
    # Where trials run on a cluster: auto (a Katib Experiment when Katib is installed, else TrainJobs or
    # PyTorchJobs through the train step's launcher), jobs, or katib. Local runs use processes.
    engine: Literal["auto", "jobs", "katib"] = "auto"
    # Written by the tune step into the config it hands to training (the chosen values and the search);
    # not a setting.
    chosen: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_range(self.trials, "tune.trials", 0, MAX_TRIALS)
        check_range(self.parallel_trials, "tune.parallel_trials", 1, MAX_TRIALS)
        check(self.max_failed_trials is None or 0 <= self.max_failed_trials <= MAX_TRIALS, "tune.max_failed_trials",
              f"{self.max_failed_trials!r} must be in [0, {MAX_TRIALS}], or null for a quarter of the trials")
        check(self.trial_steps is None or 1 <= self.trial_steps <= MAX_STEPS, "tune.trial_steps",
              f"{self.trial_steps!r} must be in [1, {MAX_STEPS}], or null for train.max_steps")
        for name in ("trial_seconds", "total_seconds"):
            value = getattr(self, name)
            check(value is None or 60 <= value <= MAX_WAIT_SECONDS, f"tune.{name}",
                  f"{value!r} must be in [60, {MAX_WAIT_SECONDS}] seconds, or null")
        check_range(self.seed, "tune.seed", 0, 2**32 - 1)
        check_range(self.grid_points, "tune.grid_points", 2, MAX_CHOICES)
        parsed: dict[str, SearchDimension | str] = {}
        for key, dimension in self.space.items():
            where = f"tune.space.{key}"
            check_tunable_key(key, where)
            if isinstance(dimension, str):
                dimension = parse_dimension(dimension, where)
            dimension.check(where)
            parsed[key] = dimension
        self.space = parsed
        check(self.trials == 0 or bool(self.space), "tune.space",
              "tune.trials > 0 needs a search space, e.g. tune.space={train.lr: 'log_uniform(1e-4, 1e-1)'}")
        for key in self.scientific:
            check(key in self.space, "tune.scientific", f"'{key}' is not a key of tune.space ({', '.join(self.space)})")
        for key in self.fixed:
            check(key not in self.space, "tune.fixed", f"'{key}' is searched (tune.space) and so cannot be fixed")
            check(len(key.split(".")) >= 2, "tune.fixed", f"'{key}' must be a config key, e.g. train.batch_size")

    def dimensions(self) -> dict[str, SearchDimension]:
        """The space with every dimension parsed (``__post_init__`` parsed them)."""
        return {key: d for key, d in self.space.items() if isinstance(d, SearchDimension)}

    def role_of(self, key: str) -> str:
        """``scientific``, ``nuisance`` (the rest of the space) or ``fixed``."""
        return "scientific" if key in self.scientific else "fixed" if key in self.fixed else "nuisance"

    def failure_limit(self) -> int:
        """How many failed trials the search tolerates before it stops."""
        return self.max_failed_trials if self.max_failed_trials is not None else max(1, self.trials // 4)
