"""The task's fitted state is plain JSON: what the snapshot's ``preprocessing.json`` stores and every step reads back.

``fit`` / ``fit_streamed`` are the user's code; a numpy scalar in the state would fail to store with an
error that names no part, and an int dict key would silently come back as text in every later step.
"""

from __future__ import annotations

import json
from typing import Any

from ctpipe.components.lib.errors import ConfigError


def check_task_state(task: Any, state: Any) -> None:
    """ConfigError unless ``state`` (what ``fit`` / ``fit_streamed`` returned) is plain JSON that loads back as itself.

    The state is stored as ``preprocessing.json`` in the snapshot and in every export, and every later step
    reads it from there: a numpy value would fail to store, an int dict key would come back as text."""
    problem = "it is a " + _type_name(state) if not isinstance(state, dict) else _not_plain_json(state, "state")
    if problem:
        raise ConfigError(
            f"task '{task.name}': fit returned a state that is not plain JSON ({problem}); it is stored as "
            "preprocessing.json in the snapshot and in every export: use a dict of str, int, float, bool, None, "
            "lists and dicts with str keys (e.g. float(x) for a numpy scalar, x.tolist() for an array)"
        )


def _not_plain_json(value: Any, where: str) -> str | None:
    """Where ``value`` stops being plain JSON (the first such place), or None."""
    if value is None or isinstance(value, bool | int | float | str):
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where} has the key {key!r} ({type(key).__name__}), which JSON turns into {json.dumps(str(key))}"
            found = _not_plain_json(item, f"{where}[{key!r}]")
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        return next((f for i, item in enumerate(value) if (f := _not_plain_json(item, f"{where}[{i}]"))), None)
    return f"{where} is a {_type_name(value)}"


def _type_name(value: Any) -> str:
    kind = type(value)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
