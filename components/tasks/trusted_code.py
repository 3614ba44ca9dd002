"""Which task code a served model may import: a built-in task, or the user's task code the model ships.

    check_served_task(record, code_dir)   # before load_task(record), when loading a registered model

A model export's task record names the code that rebuilds its network (``task.entrypoint``), and loading
imports that module and calls the factory. A record read from an artifact store is data, not a decision:
without this check a record naming ``os:system`` would make a loader run a command. So a served model's
task is a built-in (ctpipe's own entrypoints, by name or exactly), or a module whose top-level package is
the one shipped in the model's code folder; ctpipe's other modules and everything installed are refused.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

from ctpipe.components.lib.errors import UserError
from ctpipe.components.tasks.registry import BUILTIN_TASKS


class UntrustedTaskError(UserError):
    """A model's task record names code that neither ctpipe's built-in tasks nor the model's own code provide."""


def check_served_task(record: dict[str, Any], code_dir: Path) -> None:
    """UntrustedTaskError unless ``record``'s task is built in or its module's package lies in ``code_dir``."""
    entrypoint = record.get("entrypoint")
    if not entrypoint or entrypoint in BUILTIN_TASKS.values():
        return  # by name, load_task accepts only the built-ins
    allowed = (f"a built-in task ({', '.join(sorted(BUILTIN_TASKS.values()))}) or a module of the task package "
               f"shipped in the model's code folder '{code_dir}'")
    top = entrypoint.partition(":")[0].split(".")[0]
    if top == __name__.split(".")[0]:
        raise UntrustedTaskError(f"the model's task.entrypoint '{entrypoint}' names ctpipe code that is not a "
                                 f"task; a served model's task must be {allowed}")
    where = _source_of(top)
    if where is None or not where.is_absolute() or not where.resolve().is_relative_to(code_dir.resolve()):
        found = "it cannot be found" if where is None else f"it would be imported from '{where}'"
        raise UntrustedTaskError(
            f"the model's task.entrypoint '{entrypoint}' is not code the model ships ({found}); a served model's "
            f"task must be {allowed}. Nothing was imported. Load the model in a fresh process (as a model server "
            "does), where its own code comes first, or re-register it")


def _source_of(top: str) -> Path | None:
    """Where the top-level module ``top`` is (or would be) imported from, without importing it."""
    loaded = sys.modules.get(top)
    spec = loaded.__spec__ if loaded is not None else importlib.util.find_spec(top)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # A built-in or frozen module (os, sys) has no file: a relative name, never inside the code folder.
    return Path(spec.origin) if spec.origin and spec.origin not in ("built-in", "frozen") else Path(f"<{top}>")
