"""The watcher's run ledger in the ctpipe home: one record per data fingerprint, claimed atomically.

A record is created whole or not at all (written to a private file, then hard-linked to its name, which
fails when the name exists), so of several watchers (threads, processes, a restarted
watcher) exactly one claims a fingerprint and starts its first attempt. Every later change goes through
the home's file lock as a read-modify-write, so a retry is claimed by exactly one watcher too (the
attempt number moves from n to n+1 once), and a late write of an earlier attempt cannot overwrite the
current one. A file lock also serialises the "is a run still going?" check with the claim, so the
concurrency limit holds. Local filesystems (or NFS with working locks) only: watchers in different homes
must share the home (the CronJob mounts it from a volume).

A record keeps its current attempt's fields at the top (``status``, ``pid`` or ``run_id``, ``error``...)
and every attempt, with its outcome, in ``attempts``::

    {"fingerprint": ..., "trigger": "new_data", "claimed_at": ..., "attempt": 2, "status": "running",
     "pid": 4242, "attempts": [{"attempt": 1, "status": "lost", "failure": "infrastructure", ...},
                               {"attempt": 2, "status": "running", "pid": 4242, ...}],
     "next_attempt_after": null, "given_up": false}
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text, create_exclusive_text
from ctpipe.components.lib.errors import UserError

ACTIVE = ("starting", "running")
# What belongs to one attempt (top level mirrors the current attempt's values).
ATTEMPT_FIELDS = (
    "status", "attempt_claimed_at", "watcher_pid", "backend", "pid", "host", "log", "run_id", "run_name", "started_at",
    "finished_at", "exit_code", "error", "user_error", "failure", "summary_path", "model_version", "settled_at",
    "stopped_leftovers", "marker", "failed_tasks", "state", "drift_report_mlflow_run", "drift_report_error",
    "start_error", "error_type", "config_sha256", "data_fingerprint", "model_fingerprint",
)  # fmt: skip
# Decided per attempt by the watcher when it settles one; cleared when the next attempt is claimed.
RETRY_FIELDS = ("next_attempt_after", "given_up", "decision")

_held = threading.local()  # lock files this thread holds (the lock is re-entrant within a thread)


class Ledger:
    """Run records under ``HOME/watch/ledger/<fingerprint>.json``."""

    def __init__(self, home: str | Path) -> None:
        self.root = Path(home) / "watch" / "ledger"
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, fingerprint: str) -> Path:
        return self.root / f"{fingerprint}.json"

    def locked(self):
        """Hold the ledger's exclusive lock (blocks other watchers of this home; re-entrant in a thread)."""
        return lock_dir(self.root)

    def claim(self, fingerprint: str, record: dict[str, Any]) -> bool:
        """Create the record for ``fingerprint`` as attempt 1; False when one exists (already started)."""
        now = record.get("claimed_at", time.time())
        # The first attempt's claim time is the record's claimed_at (later attempts add attempt_claimed_at).
        created = {"fingerprint": fingerprint, "claimed_at": now, **record, "status": "starting", "attempt": 1}
        created["attempts"] = [{"attempt": 1, "status": "starting", "attempt_claimed_at": now}]
        for key in ("watcher_pid",):
            if key in record:
                created["attempts"][0][key] = record[key]
        return create_exclusive_text(self.path(fingerprint), json.dumps(created))

    def claim_attempt(self, fingerprint: str, attempt: int, *, now: float | None = None, restart: bool = False) -> bool:
        """Claim ``attempt`` (n+1 after attempt n ended; with ``restart`` the current one again, when the
        watcher that claimed it died before starting it). False when another watcher got there first."""
        now = time.time() if now is None else now
        with self.locked():
            record = self.get(fingerprint)
            if record is None:
                return False
            current = int(record.get("attempt", 1))
            if restart:
                if current != attempt or record.get("status") != "starting":
                    return False
                return bool(self._write_attempt(record, attempt, {"attempt_claimed_at": now, "watcher_pid": os.getpid(), "start_error": None}))
            if current != attempt - 1 or record.get("status") in ACTIVE:
                return False
            for key in (*ATTEMPT_FIELDS, *RETRY_FIELDS):
                record.pop(key, None)
            record["attempt"] = attempt
            record.setdefault("attempts", []).append({"attempt": attempt})
            self._write_attempt(
                record, attempt, {"status": "starting", "attempt_claimed_at": now, "watcher_pid": os.getpid()}
            )
            return True

    def get(self, fingerprint: str) -> dict[str, Any] | None:
        """The record of ``fingerprint``, None when there is none; an unreadable one is an error."""
        path = self.path(fingerprint)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        try:
            return json.loads(text)
        except ValueError as err:
            raise UnreadableRecord(path, err) from None

    def update(self, fingerprint: str, **fields: Any) -> dict[str, Any]:
        """Merge fields into the record's top level (and, for attempt fields, into its current attempt)."""
        return update_record(self.path(fingerprint), **fields)

    def update_attempt(self, fingerprint: str, attempt: int | None, **fields: Any) -> dict[str, Any] | None:
        """Merge fields into ``attempt`` (None: the current one); ignored (None) when that is not current."""
        return update_attempt(self.path(fingerprint), attempt, **fields)

    def _write_attempt(self, record: dict[str, Any], attempt: int, fields: dict[str, Any]) -> dict[str, Any]:
        merge_attempt(record, attempt, fields)
        atomic_write_text(self.path(record["fingerprint"]), json.dumps(record))
        return record

    def release(self, fingerprint: str) -> None:
        """Drop a claim whose first attempt could not be started, so a later check starts it afresh."""
        self.path(fingerprint).unlink(missing_ok=True)

    def unreadable(self) -> list[Path]:
        """Records that exist but are not valid JSON (see UnreadableRecord)."""
        return [path for path in sorted(self.root.glob("*.json")) if path.exists() and read_record(path) is None]

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


class UnreadableRecord(UserError):
    """A ledger record that exists but cannot be read: whether its data version was started is unknown."""

    def __init__(self, path: Path, err: Exception) -> None:
        super().__init__(
            f"the watcher's ledger record {path} is unreadable ({type(err).__name__}: {err}): it was cut short "
            "(a watcher killed or a disk full while writing it, before ctpipe wrote records whole; a power loss) "
            f"or edited by hand. Whether a run of data version {path.stem[:12]} was started cannot be told from "
            "it, so the watcher starts nothing for it: look for such a run (the KFP UI, HOME/watch/logs), then "
            "delete the file, and the next check starts the version if it is still untrained."
        )


@contextlib.contextmanager
def lock_dir(directory: str | Path) -> Iterator[None]:
    """The exclusive ``flock`` of ``directory/.lock``, re-entrant within one thread."""
    key = str(Path(directory).resolve())
    held: set[str] = _held.__dict__.setdefault("paths", set())
    if key in held:
        yield
        return
    with open(Path(directory) / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_record(path: str | Path) -> dict[str, Any] | None:
    """The record at ``path``; None when it is gone (released) or unreadable (``Ledger.get`` says so)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def merge_attempt(record: dict[str, Any], attempt: int, fields: dict[str, Any]) -> None:
    """Put ``fields`` on the record's top level and, for attempt fields, on attempt ``attempt``."""
    record.update(fields, updated_at=time.time())
    attempts = record.setdefault("attempts", [])
    while len(attempts) < attempt:
        attempts.append({"attempt": len(attempts) + 1})
    entry = attempts[attempt - 1]
    entry.update({k: v for k, v in fields.items() if k in ATTEMPT_FIELDS})


def update_record(path: str | Path, **fields: Any) -> dict[str, Any]:
    """Merge ``fields`` into the record at ``path`` under the ledger lock (atomic replace)."""
    return update_attempt(path, None, **fields) or {}


def update_attempt(path: str | Path, attempt: int | None, **fields: Any) -> dict[str, Any] | None:
    """Merge ``fields`` into the current attempt of the record at ``path``, if it is ``attempt``.

    A process of an earlier attempt that reports late (it outlived its settling) changes nothing: its
    attempt was already settled and another one started.
    """
    path = Path(path)
    with lock_dir(path.parent):
        record = read_record(path)
        if record is None:
            return None  # released (never started) or removed by hand: nothing to report to
        current = int(record.get("attempt", 1))
        if attempt is not None and int(attempt) != current:
            return None
        merge_attempt(record, current, fields)
        atomic_write_text(path, json.dumps(record))
        return record
