"""The rules every config section validates with: a failed check raises ``ConfigError`` naming the field.

A message says what is wrong with the value and what is allowed, e.g.
``invalid config value for 'train.lr': 20.0 must be in (0, 10)``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ctpipe.components.lib.errors import ConfigError


def check(condition: bool, name: str, message: str) -> None:
    """Raise ``ConfigError`` for the field ``name`` unless ``condition`` holds."""
    if not condition:
        raise ConfigError(f"invalid config value for '{name}': {message}")


def check_fraction(value: float, name: str, *, open_low: bool = False) -> None:
    """Require ``value`` in [0, 1] (or (0, 1] with ``open_low``)."""
    ok = (0.0 < value <= 1.0) if open_low else (0.0 <= value <= 1.0)
    check(ok, name, f"{value!r} must be a fraction in {'(0, 1]' if open_low else '[0, 1]'}")


def host_of_uri_with_credentials(uri: str | None) -> str | None:
    """The host of ``uri`` when it carries credentials (``scheme://user:password@host``), else None.

    Callers name the host in their error, never the URI: the message must not repeat the secret."""
    netloc = urlsplit(uri or "").netloc
    return netloc.rpartition("@")[2] if "@" in netloc else None
