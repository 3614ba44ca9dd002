"""The run's config with its task's own defaults: ctpipe's, then the task's ``config_defaults``, then the user's.

    config = load_run_config("my.yaml", ["task.name=causal_lm"])   # select.metric=val_loss: the task's

The task is known only once the user's file and ``--set`` are read, so the config is loaded, the task it
names is loaded, and the config is loaded again with the task's settings as the lowest layer above
ctpipe's own defaults: the user's file and ``--set`` still win over them. ``with_task_defaults_of`` does
the same for a compiled config whose run names another task (the run's overrides in the KFP UI).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config, TaskConfig, apply_settings, load_config, load_values
from ctpipe.components.lib.config.coerce import build_dataclass
from ctpipe.components.tasks.registry import TaskError, load_task, task_record


def load_run_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    defaults: dict[str, Any] | Sequence[dict[str, Any] | Sequence[str]] | None = None,
) -> Config:
    """``load_config`` with the run's task's ``config_defaults`` under ``defaults`` (one mapping or layers, as
    ``load_config`` takes them), the file and ``--set``."""
    # Only the task section is validated here: the rest may be valid only over the task's defaults
    # (select.mode=min for causal_lm's val_loss), which are not known until the task is.
    values = load_values(path, overrides, defaults=defaults)
    task_settings = _task_defaults(build_dataclass(TaskConfig, values["task"], "task"))
    if not task_settings:
        return Config.from_dict(values)
    layers = [defaults] if isinstance(defaults, dict) else list(defaults or [])
    return load_config(path, overrides, defaults=[task_settings, *layers])


def task_config_defaults(config: Config) -> tuple[str, ...]:
    """The config's task's ``config_defaults`` (``section.key=value`` settings); none when the task cannot be
    loaded here (a user's package that is not installed where the pipeline is compiled: the steps load it and
    report it)."""
    return _task_defaults(config.task)


def _task_defaults(task_config: TaskConfig) -> tuple[str, ...]:
    try:
        task = load_task(task_record(task_config))
    except TaskError:
        return ()
    return tuple(task.config_defaults)


_ABSENT = object()


def with_task_defaults_of(compiled: dict[str, Any], task_values: dict[str, Any]) -> dict[str, Any]:
    """``compiled`` (a config's values, which hold its task's ``config_defaults``) moved to the task of
    ``task_values``: every setting of the compiled task's defaults that still has that default goes back to
    ctpipe's own value, then the new task's ``config_defaults`` apply. Settings the user chose stay."""
    own = Config().to_dict()
    old_settings = task_config_defaults(Config.from_dict(compiled))
    with_old = Config.from_dict(apply_settings(own, list(old_settings))).to_dict()  # normalised as compiled
    values = copy.deepcopy(compiled)
    for setting in old_settings:
        path = setting.partition("=")[0].strip().split(".")
        if _get(values, path) == _get(with_old, path):
            _put(values, path, _get(own, path))
    return apply_settings(values, list(task_config_defaults(Config.from_dict({**values, "task": task_values}))))


def _get(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _put(values: dict[str, Any], path: list[str], value: Any) -> None:
    node = values
    for part in path[:-1]:
        node = node.setdefault(part, {})
    if value is _ABSENT:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = copy.deepcopy(value)
