"""The rules every config section validates with: a failed check raises ``ConfigError`` naming the field.

A message says what is wrong with the value and what is allowed, e.g.
``invalid config value for 'train.lr': 20.0 must be in (0, 10)``.
"""

from __future__ import annotations

import re

from ctpipe.components.lib.errors import ConfigError


def check(condition: bool, name: str, message: str) -> None:
    """Raise ``ConfigError`` for the field ``name`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(f"invalid config value for '{name}': {message}")


def check_fraction(value: float, name: str, *, open_low: bool = False) -> None:
    """Require ``value`` in [0, 1] (or (0, 1] with ``open_low``)."""
    ok = (0.0 < value <= 1.0) if open_low else (0.0 <= value <= 1.0)
    check(ok, name, f"{value!r} must be a fraction in {'(0, 1]' if open_low else '[0, 1]'}")


# Names that become MLflow names and path parts (mlartifacts/<experiment>, the watcher's reference cache
# <model_name>/<version>): a '/' nests or escapes a folder, '..' climbs out of the home, ':' and '/' are
# refused by MLflow's registry, and a leading '.' or '-' hides a folder or reads as an option.
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
SAFE_NAME_CHARACTERS = "letters, digits, '.', '_' and '-', starting with a letter or digit"
MAX_NAME_LENGTH = 128


def check_safe_name(value: object, name: str) -> None:
    """Require ``value`` to be a name that is safe as an MLflow name and as one path component."""
    ok = (isinstance(value, str) and len(value) <= MAX_NAME_LENGTH and bool(_SAFE_NAME.fullmatch(value))
          and ".." not in value)
    check(ok, name, f"{value!r} is not allowed: it becomes an MLflow name and a folder name, so it must have no '/', "
                    f"no '..' and at most {MAX_NAME_LENGTH} characters; allowed: {SAFE_NAME_CHARACTERS}")


# Upper bounds of numeric settings: what the code can use. Beyond them a value overflows late (a
# timedelta in every rank, an int32 field of a Kubernetes object) or asks for more than any run holds.
MAX_ROWS = 10**12  # rows of a data set, a split or a sample
MAX_STEPS = 10**9  # optimiser steps, and intervals counted in steps
MAX_WAIT_SECONDS = 365 * 24 * 3600  # any wait, backoff, cool-down or TTL: a year
INT32_MAX = 2**31 - 1  # Kubernetes' int32 fields (backoffLimit, ttlSecondsAfterFinished)


def check_range(value: float, name: str, low: float, high: float, *, low_open: bool = False, why: str = "") -> None:
    """Require ``low <= value <= high`` (``low < value`` with ``low_open``); the message names both bounds."""
    ok = (low < value if low_open else low <= value) and value <= high
    check(ok, name, f"{value!r} must be in {'(' if low_open else '['}{low!r}, {high!r}]{why}")
