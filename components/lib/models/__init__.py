"""The model zoo and the single-file model export.

Nothing is imported here eagerly: ``linear_fit`` (numpy and scipy) is used by the validate step, which never
imports torch, and importing a submodule runs this file first."""

from typing import Any

__all__ = ["InputSpec", "build_model", "init_output_bias"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from ctpipe.components.lib.models import tabular

        return getattr(tabular, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
