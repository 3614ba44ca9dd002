"""The watcher's run ledger in the ctpipe home: one record per data fingerprint, claimed atomically.

A record is created with ``O_CREAT | O_EXCL``, so of several watchers (threads, processes, a restarted
watcher) exactly one claims a fingerprint and starts its run; the record then follows the run
(starting → running → succeeded/failed). A file lock serialises the "is a run still going?" check with
the claim, so the concurrency limit holds too. Local filesystems (or NFS with working locks) only:
watchers in different homes must share the home (the CronJob mounts it from a volume).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pipelines.triggers.atomic import atomic_write_text

ACTIVE = ("starting", "running")


class Ledger:
    """Run records under ``HOME/watch/ledger/<fingerprint>.json``."""

    def __init__(self, home: str | Path) -> None:
        self.root = Path(home) / "watch" / "ledger"
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, fingerprint: str) -> Path:
        return self.root / f"{fingerprint}.json"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the ledger's exclusive lock (blocks other watchers of this home)."""
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def claim(self, fingerprint: str, record: dict[str, Any]) -> bool:
        """Create the record for ``fingerprint``; False when one exists (the run was already started)."""
        try:
            fd = os.open(self.path(fingerprint), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            json.dump({"fingerprint": fingerprint, "claimed_at": time.time(), "status": "starting", **record}, handle)
        return True

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        return read_record(self.path(fingerprint))

    def update(self, fingerprint: str, **fields: Any) -> dict[str, Any]:
        return update_record(self.path(fingerprint), **fields)

    def release(self, fingerprint: str) -> None:
        """Drop a claim whose run could not be started, so a later check retries."""
        self.path(fingerprint).unlink(missing_ok=True)

    def records(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.root.glob("*.json")):
            record = read_record(path)
            if record is not None:
                out.append(record)
        return out

    def last_started(self, trigger: str) -> float | None:
        """When the newest run with ``trigger`` was claimed (epoch seconds), or None."""
        times = [r.get("claimed_at", 0.0) for r in self.records() if r.get("trigger") == trigger]
        return max(times) if times else None


def read_record(path: str | Path) -> dict[str, Any] | None:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None  # being written for the first time by another watcher, or gone


def update_record(path: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the record at ``path`` (atomic replace)."""
    path = Path(path)
    record = read_record(path) or {}
    record.update(fields, updated_at=time.time())
    atomic_write_text(path, json.dumps(record))
    return record
