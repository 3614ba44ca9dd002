"""Deprecated config keys: each still works, resolved into the key that replaced it, a conflict is an error.

``task.options.text_column`` named the text column before ``data.text_column`` (what the columns mean is
the data section's job). A config giving only the old key gets its value in ``data.text_column`` and a
warning; one giving both with different values fails naming both, since either choice would be a guess.
"""

from __future__ import annotations

import warnings
from typing import Any

from ctpipe.components.lib.errors import ConfigError


def resolve_aliases(config: Any) -> None:
    """Move every deprecated key's value into its replacement in ``config`` (a ``Config``), in place."""
    options = config.task.options or {}
    alias = options.get("text_column")
    if alias is None:
        return
    current = config.data.text_column
    if current is not None and current != alias:
        raise ConfigError(
            f"invalid config: data.text_column={current!r} and task.options.text_column={alias!r} name different "
            "text columns; task.options.text_column is a deprecated alias of data.text_column: set only "
            "data.text_column"
        )
    if current is None:
        if not isinstance(alias, str) or not alias.strip():
            raise ConfigError(f"invalid config value for 'task.options.text_column': {alias!r} must name a column "
                              "(and the key is deprecated: set data.text_column instead)")
        warnings.warn(f"task.options.text_column={alias!r} is deprecated; set data.text_column={alias!r} instead",
                      FutureWarning, stacklevel=2)
        config.data.text_column = alias
