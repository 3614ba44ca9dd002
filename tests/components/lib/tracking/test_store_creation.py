"""Processes that open a new local (SQLite) MLflow store at the same time all get a working store.

Two ``ctpipe run`` on one fresh home both open ``mlflow.db`` in their first step; MLflow runs its
migrations on a store whose tables are missing, and two processes running them at once made one fail
(``duplicate column name: step``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

OPEN_AT = textwrap.dedent(
    """
    import sys, time
    import mlflow  # imported before the start line, so that the processes open the store together
    from ctpipe.components.lib.tracking.store import ensure_experiment
    uri, start = sys.argv[1], float(sys.argv[2])
    time.sleep(max(start - time.time(), 0))
    print(ensure_experiment(uri, "shared"))
    """
)


def test_processes_creating_one_new_sqlite_store_at_once_all_succeed(tmp_path: Path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = time.time() + 12  # after every process has imported MLflow, on a loaded machine too
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_AT, uri, str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    results = [proc.communicate(timeout=120) for proc in procs]
    errors = [err[-600:] for proc, (_, err) in zip(procs, results, strict=True) if proc.returncode != 0]
    assert not errors, errors
    assert len({out.strip() for out, _ in results}) == 1  # one experiment, the same id for all


WATCHER_OPENS_AT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import mlflow
    from ctpipe.pipelines.triggers.champion import ensure_local_store
    uri, start, watch_dir = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    watch_dir.mkdir(parents=True, exist_ok=True)
    time.sleep(max(start - time.time(), 0))
    ensure_local_store(uri, watch_dir)
    print(mlflow.MlflowClient(uri, registry_uri=uri).search_experiments()[0].name)
    """
)


def test_a_watcher_and_runs_creating_one_new_sqlite_store_at_once_all_succeed(tmp_path: Path):
    """The watcher's first check and a `ctpipe run` on a fresh home both create ``mlflow.db``: they take the
    same lock (before, the watcher took only its ledger's, so it could run the migrations beside a run)."""
    home = tmp_path / "home"
    uri = f"sqlite:///{home / 'mlflow.db'}"
    start = time.time() + 12
    commands = [[sys.executable, "-c", WATCHER_OPENS_AT, uri, str(start), str(home / "watch")]] * 2
    commands += [[sys.executable, "-c", OPEN_AT, uri, str(start)]] * 2
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in commands]
    results = [proc.communicate(timeout=120) for proc in procs]
    errors = [err[-600:] for proc, (_, err) in zip(procs, results, strict=True) if proc.returncode != 0]
    assert not errors, errors


def _schema_versions(db_path: Path) -> tuple[str, str]:
    """(the store's alembic revision, the head of the installed MLflow's migrations)."""
    import sqlalchemy
    from mlflow.store.db.utils import _get_latest_schema_revision, _get_schema_version

    engine = sqlalchemy.create_engine(f"sqlite:///{db_path}")
    try:
        return _get_schema_version(engine), _get_latest_schema_revision()
    finally:
        engine.dispose()


def test_a_new_store_appears_only_whole_at_mlflows_schema_head(tmp_path: Path, monkeypatch):
    """No reader ever sees a half-migrated ``mlflow.db``: the schema is built beside it, without a sync per
    migration (one sync of the finished file), and renamed into place."""
    import mlflow.store.db.utils as db_utils
    import sqlalchemy

    from ctpipe.components.lib.tracking import use_tracking

    db_path = tmp_path / "home" / "mlflow.db"
    seen = []
    upgrade = db_utils._upgrade_db

    def watched_upgrade(engine):
        with engine.connect() as connection:
            synchronous = connection.execute(sqlalchemy.text("PRAGMA synchronous")).scalar()
        seen.append((db_path.exists(), synchronous))
        upgrade(engine)

    monkeypatch.setattr(db_utils, "_upgrade_db", watched_upgrade)
    use_tracking(f"sqlite:///{db_path}")
    assert seen == [(False, 0)]  # built once, elsewhere, with SQLite's syncs off
    current, head = _schema_versions(db_path)
    assert current == head
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["mlflow.db"]  # no temporary file left
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{db_path}")
    assert client.get_experiment("0").name == "Default"
    # The finished file keeps SQLite's defaults for everyone who opens it later.
    with sqlalchemy.create_engine(f"sqlite:///{db_path}").connect() as connection:
        assert connection.execute(sqlalchemy.text("PRAGMA synchronous")).scalar() == 2
        assert connection.execute(sqlalchemy.text("PRAGMA journal_mode")).scalar() == "delete"


def test_a_failed_build_leaves_no_store_and_the_next_open_builds_it(tmp_path: Path, monkeypatch):
    import mlflow.store.db.utils as db_utils

    from ctpipe.components.lib.tracking import use_tracking

    db_path = tmp_path / "mlflow.db"
    upgrade = db_utils._upgrade_db

    def failing_upgrade(engine):
        raise OSError("disk full (injected)")

    monkeypatch.setattr(db_utils, "_upgrade_db", failing_upgrade)
    try:
        use_tracking(f"sqlite:///{db_path}")
    except OSError as err:
        assert "injected" in str(err)
    else:
        raise AssertionError("the failed build was not reported")
    assert list(tmp_path.iterdir()) == []  # neither a half-built store nor its temporary file
    monkeypatch.setattr(db_utils, "_upgrade_db", upgrade)
    use_tracking(f"sqlite:///{db_path}")
    current, head = _schema_versions(db_path)
    assert current == head


def test_ensure_store_builds_a_new_store_once_and_leaves_other_stores_alone(tmp_path: Path):
    from ctpipe.components.lib.tracking.sqlite_store import ensure_store

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert ensure_store(uri) is True
    before = (tmp_path / "mlflow.db").stat().st_mtime_ns
    assert ensure_store(uri) is False
    assert (tmp_path / "mlflow.db").stat().st_mtime_ns == before
    assert ensure_store("http://mlflow.example:5000") is False
    current, head = _schema_versions(tmp_path / "mlflow.db")
    assert current == head
