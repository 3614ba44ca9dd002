"""A user's model as the reports show it: its class, parameter count and the task's options.

``TaskSpec.describe_model``'s default (``ModelParts.describe`` unset), so a user task's sanity report, run params, model card and registry
tags name the user's network, not the tabular ``model`` config section it never reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def describe_built_model(name: str, build: Callable[[Any, dict[str, Any]], Any], config: Any,
                         state: dict[str, Any]) -> dict[str, Any]:
    """``{"kind", "class", "parameters", **task.options}`` of the model ``build`` (the task's) returns, built on
    torch's meta device (shapes only: cheap even for a large model). A model that cannot be built so (it
    reads data in ``__init__``, or needs a fitted state not yet there) is described by its task alone."""
    import torch

    options = dict(getattr(getattr(config, "task", None), "options", None) or {})
    try:
        with torch.device("meta"):
            model = build(config, state)
    except Exception:  # a description must never fail a step; the model is still built for real elsewhere
        model = None
    if not isinstance(model, torch.nn.Module):
        return {"kind": name, **options}
    kind = type(model)
    return {"kind": kind.__name__, "class": f"{kind.__module__}.{kind.__qualname__}",
            "parameters": int(sum(p.numel() for p in model.parameters())), **options}
