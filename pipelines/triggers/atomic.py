"""Atomic file writes for watchers that race, as processes or as threads of one process."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def private_name(prefix: str) -> str:
    """A name no other process or thread writing at the same time uses."""
    return f"{prefix}.{os.getpid()}.{threading.get_ident()}"


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` to a private temporary file, then rename it over ``path``: readers see whole files."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(private_name(f".{path.name}") + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
