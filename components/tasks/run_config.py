"""The run's config with its task's own defaults: ctpipe's, then the task's ``config_defaults``, then the user's.

    config = load_run_config("my.yaml", ["task.name=causal_lm"])   # select.metric=val_loss: the task's

The task is known only once the user's file and ``--set`` are read, so the config is loaded, the task it
names is loaded, and the config is loaded again with the task's settings as the lowest layer above
ctpipe's own defaults: the user's file and ``--set`` still win over them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from components.config import Config, load_config
from components.tasks.registry import TaskError, load_task, task_record


def load_run_config(
    path: str | Path | None = None,
    overrides: list[str] | None = None,
    *,
    defaults: dict[str, Any] | Sequence[dict[str, Any] | Sequence[str]] | None = None,
) -> Config:
    """``load_config`` with the run's task's ``config_defaults`` under ``defaults`` (one mapping or layers, as
    ``load_config`` takes them), the file and ``--set``."""
    config = load_config(path, overrides, defaults=defaults)
    task_settings = task_config_defaults(config)
    if not task_settings:
        return config
    layers = [defaults] if isinstance(defaults, dict) else list(defaults or [])
    return load_config(path, overrides, defaults=[task_settings, *layers])


def task_config_defaults(config: Config) -> tuple[str, ...]:
    """The config's task's ``config_defaults`` (``section.key=value`` settings); none when the task cannot be
    loaded here (a user's package that is not installed where the pipeline is compiled: the steps load it and
    report it)."""
    try:
        task = load_task(task_record(config.task))
    except TaskError:
        return ()
    return tuple(task.config_defaults)
