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
