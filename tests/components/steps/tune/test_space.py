"""The trials of a search: quasi-random points on each range's scale, a grid, the configured values first, and a
space that can make an invalid config refused by name before anything starts."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctpipe.components.lib.config import ConfigError, SearchDimension
from ctpipe.components.run_config import resolve_config
from ctpipe.components.steps.tune.space import grid_values, plan_search, position, unit_points, value_at


def config(*settings):
    return resolve_config(settings=["tune.trials=9", *settings])


def test_quasi_random_points_fill_every_stratum_of_every_dimension():
    """Scrambled Sobol: the first 2^m points put one point in each 1/2^m of each axis; independent draws do not."""
    points = unit_points("quasi_random", 8, 3, seed=5)
    for axis in range(3):
        assert sorted((points[:, axis] * 8).astype(int).tolist()) == list(range(8))
    assert np.array_equal(points, unit_points("quasi_random", 8, 3, seed=5))  # the seed decides them
    assert not np.array_equal(points, unit_points("quasi_random", 8, 3, seed=6))
    draws = unit_points("random", 8, 3, seed=5)
    assert any(len(set((draws[:, axis] * 8).astype(int).tolist())) < 8 for axis in range(3))


def test_values_on_each_scale():
    log = SearchDimension(kind="log_uniform", low=1e-4, high=1.0)
    assert value_at(log, 0.5) == pytest.approx(1e-2) and value_at(log, 0.0) == 1e-4
    assert position(log, 1e-2) == pytest.approx(0.5) and position(log, 1.0) == pytest.approx(1.0)
    whole = SearchDimension(kind="int", low=16, high=19)
    assert [value_at(whole, u) for u in (0.0, 0.26, 0.51, 0.99)] == [16, 17, 18, 19]
    choice = SearchDimension(kind="choice", values=["a", "b", "c"])
    assert [value_at(choice, u) for u in (0.0, 0.34, 0.99)] == ["a", "b", "c"]
    assert grid_values(log, 3) == [1e-4, 1e-2, 1.0]
    assert grid_values(SearchDimension(kind="log_int", low=16, high=256), 5) == [16, 32, 64, 128, 256]


def test_trial_zero_is_the_configured_values_then_sobol_points():
    plan = plan_search(config("tune.trial_steps=50"))
    assert plan.trials[0].baseline and plan.trials[0].values == {"train.lr": 0.003, "train.weight_decay": 0.01}
    sampled = plan.trials[1:]
    assert [t.index for t in sampled] == list(range(1, 9)) and not any(t.baseline for t in sampled)
    lrs = [t.values["train.lr"] for t in sampled]
    # One in each eighth of the log range [1e-4, 1e-1].
    assert sorted(int(8 * (math.log10(lr) + 4) / 3) for lr in lrs) == list(range(8))
    # Each trial starts from the per-trial budget: its steps, warm-up scaled with them, one checkpoint kept.
    assert (plan.base.train.max_steps, plan.base.train.warmup_steps, plan.base.train.keep_best) == (50, 2, 1)


def test_a_grid_is_the_product_of_each_range_s_grid():
    plan = plan_search(config("tune.sampler=grid", "tune.baseline_trial=false", "tune.grid_points=3",
                              'tune.space={train.lr: "log_uniform(1e-4, 1e-2)", model.hidden: "choice(32, 64, 128)"}'))
    assert sorted((t.values["train.lr"], t.values["model.hidden"]) for t in plan.trials) == sorted(
        (lr, h) for lr in (1e-4, 1e-3, 1e-2) for h in (32, 64, 128))


def test_a_range_whose_end_makes_an_invalid_config_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"tune.space.train.warmup_steps: int\(0, 80\) reaches train.warmup_steps=80.*"
                                          r"train.warmup_steps.*\[0, 50\)"):
        plan_search(config("tune.trial_steps=50", 'tune.space={train.warmup_steps: "int(0, 80)"}'))


def test_a_trial_whose_values_together_break_a_rule_is_refused_by_name():
    """Each end alone is valid; hidden=30 with 4 heads is not (a transformer's width must divide by its heads)."""
    with pytest.raises(ConfigError, match=r"tune.space: trial \d+ \(.*model.hidden=30.*model.hidden"):
        plan_search(config("tune.sampler=grid", "tune.baseline_trial=false",
                           'tune.space={model.kind: "choice(mlp, transformer)", model.hidden: "choice(32, 30)"}'))


def test_task_options_the_task_refuses_are_refused_before_any_trial():
    with pytest.raises(ConfigError, match=r"tune.space: trial 0 \(task.options.bogus=1\) makes no task"):
        plan_search(config("tune.trials=1", "tune.baseline_trial=false", 'tune.space={task.options.bogus: "choice(1)"}'))
