"""A local (SQLite) MLflow store: opened under its directory's lock, and on first use built whole.

    python -m ctpipe.components.lib.tracking.sqlite_store TRACKING_URI   # build it now, if it is new

MLflow creates a new SQLite store in place: its initial tables, then every alembic migration, each committed
(and fsynced) on its own, so a first run waited seconds on the disk and a crash midway left a half-migrated
``mlflow.db`` at the real path. Here a new store is built in a private file beside it with SQLite's syncs off
(``PRAGMA synchronous=OFF``, journal in memory: nothing reads that file until it is whole), synced once, then
renamed into place, so every reader sees no store or a store at MLflow's current schema head. ``ctpipe run``
builds the home's new store this way in a process forked from the warm-start server as soon as it knows the
tracking URI, while the first step is still to start (``pipelines/local/local_run.py``); whoever comes first
builds it, under the lock, exactly once.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from ctpipe.components.lib.atomic_files import private_name, sync_dir


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` tracking URI; None for any other store."""
    if urlparse(tracking_uri).scheme != "sqlite":
        return None
    return Path(tracking_uri[len("sqlite:///") :])


@contextmanager
def store_lock(db_path: Path) -> Iterator[None]:
    """The lock every creator of a store in ``db_path``'s directory takes (runs, steps, the watcher)."""
    directory = db_path.parent
    directory.mkdir(parents=True, exist_ok=True)
    handle = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # releases the lock


def open_sqlite_store(tracking_uri: str) -> None:
    """Open (and on first use build) a SQLite store while holding its directory's lock.

    MLflow runs its migrations on a store whose tables are missing; two processes doing that at once (two
    ``ctpipe run`` on one fresh home) made one fail with "duplicate column name". MLflow caches the store
    for the process, so later calls cost nothing.
    """
    db_path = sqlite_path(tracking_uri)
    if db_path is None:
        return
    from mlflow.tracking._tracking_service.utils import _get_store

    with store_lock(db_path):
        if not db_path.exists():
            build_store(db_path)
        _get_store(tracking_uri)


def ensure_store(tracking_uri: str) -> bool:
    """Build the SQLite store of ``tracking_uri`` if it does not exist yet; whether this call built it."""
    db_path = sqlite_path(tracking_uri)
    if db_path is None or db_path.exists():
        return False
    with store_lock(db_path):
        if db_path.exists():
            return False
        build_store(db_path)
        return True


def build_store(db_path: Path) -> None:
    """Create MLflow's schema (its initial tables, then its migrations to the head) in a private file beside
    ``db_path``, with SQLite's syncs off, then sync it once and rename it to ``db_path``. The caller holds the
    directory's lock; a failed build leaves nothing behind."""
    import sqlalchemy
    from mlflow.store.db.utils import _initialize_tables

    tmp = db_path.with_name(private_name(f".{db_path.name}") + ".tmp")
    engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")

    @sqlalchemy.event.listens_for(engine, "connect")
    def _no_syncs(connection, _record) -> None:  # per connection: the finished file keeps SQLite's defaults
        cursor = connection.cursor()
        cursor.execute("PRAGMA synchronous=OFF")
        cursor.execute("PRAGMA journal_mode=MEMORY")
        cursor.close()

    try:
        _initialize_tables(engine)
        engine.dispose()
        with open(tmp, "rb+") as handle:
            os.fsync(handle.fileno())
        tmp.replace(db_path)
    finally:
        engine.dispose()
        tmp.unlink(missing_ok=True)  # left only when the build failed
    sync_dir(db_path.parent)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m ctpipe.components.lib.tracking.sqlite_store TRACKING_URI", file=sys.stderr)
        return 2
    # Stopped (the run ended first): unwind, so that the build's temporary file is removed.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    ensure_store(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
