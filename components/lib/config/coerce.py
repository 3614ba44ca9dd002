"""Build typed dataclasses from plain values (JSON, YAML, ``--set`` text), with errors that name the field.

KFP hands integers over as floats and ``--set`` gives text, so each value is coerced to its field's
type hint (nested dataclasses, unions, literals, lists, dicts, bool/int/float/str); an unknown key or
a value of the wrong kind raises ``ConfigError`` naming ``section.field`` and what is allowed.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal

from ctpipe.components.lib.errors import ConfigError


def build_dataclass(kind: type, values: Any, where: str) -> Any:
    """An instance of dataclass ``kind`` from the mapping ``values``; ``where`` names it in errors."""
    if not isinstance(values, dict):
        raise ConfigError(f"invalid config value for '{where or 'config'}': expected a mapping, got {values!r}")
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        name = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(
            f"unknown config key '{name}'; allowed keys{' in ' + where if where else ''}: {', '.join(sorted(fields))}"
        )
    kwargs = {
        name: _coerce(hints[name], value, f"{where}.{name}" if where else name) for name, value in values.items()
    }
    return kind(**kwargs)


def _coerce(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        return build_dataclass(hint, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"invalid config value for '{where}': {value!r}")
    if origin is Literal:
        if value not in args:
            allowed = ", ".join(repr(a) for a in args)
            raise ConfigError(f"invalid config value for '{where}': {value!r}; allowed: {allowed}")
        return value
    if origin is list:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, list | tuple):
            raise ConfigError(f"invalid config value for '{where}': expected a list, got {value!r}")
        return [_coerce(args[0], v, f"{where}[{i}]") if args else v for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"invalid config value for '{where}': expected a mapping, got {value!r}")
        return {str(k): _coerce(args[1], v, f"{where}.{k}") if args else v for k, v in value.items()}
    if hint is Any:
        return value
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"invalid config value for '{where}': {value!r} is not a boolean (true/false)")
    if hint is int:
        if isinstance(value, bool):
            raise ConfigError(f"invalid config value for '{where}': {value!r} is not an integer")
        if isinstance(value, float) and value.is_integer():
            return int(value)  # KFP hands integers over as floats
        try:
            return int(value) if not isinstance(value, float) else _fail_int(value, where)
        except (TypeError, ValueError):
            raise ConfigError(f"invalid config value for '{where}': {value!r} is not an integer") from None
    if hint is float:
        if isinstance(value, bool):
            raise ConfigError(f"invalid config value for '{where}': {value!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"invalid config value for '{where}': {value!r} is not a number") from None
        # NaN fails every comparison (a bound of NaN blocks anything); an infinite timeout, TTL or decay breaks
        # the run late (timedelta(minutes=inf) overflows in every rank), so only finite numbers are settings.
        if not math.isfinite(number):
            raise ConfigError(f"invalid config value for '{where}': {value!r} is not a finite number; give a finite number")
        return number
    if hint is str:
        if isinstance(value, bool):  # str(True) is "True", which matches no "true" (a node label, a column)
            raise ConfigError(f"invalid config value for '{where}': expected text, got the boolean {value!r}; "
                              f"quote it in YAML (e.g. '{str(value).lower()}')")
        if not isinstance(value, str | int | float):
            raise ConfigError(f"invalid config value for '{where}': expected text, got {value!r}")
        return str(value)
    return value


def _fail_int(value: float, where: str) -> int:
    raise ConfigError(f"invalid config value for '{where}': {value!r} is not an integer")
