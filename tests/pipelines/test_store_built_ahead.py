"""`ctpipe run` builds a new home's MLflow store ahead, forked from the warm-start server, so that the schema's
build overlaps the CLI's own work and the first step's checks instead of heading prepare_run's MLflow set-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.warm_start import running_server
from ctpipe.pipelines.local.local_run import store_built_ahead

AHEAD = "ctpipe.components.lib.tracking.sqlite_store"


def _at_head(db_path: Path) -> bool:
    import sqlalchemy
    from mlflow.store.db.utils import _get_latest_schema_revision, _get_schema_version

    engine = sqlalchemy.create_engine(f"sqlite:///{db_path}")
    try:
        return _get_schema_version(engine) == _get_latest_schema_revision()
    finally:
        engine.dispose()


def test_a_new_local_store_is_built_ahead_through_the_warm_start_server_and_only_when_new(tmp_path: Path):
    home, run_dir = tmp_path / "home", tmp_path / "run"
    run_dir.mkdir()
    uri = local_tracking_uri(home)
    with running_server(preload=("mlflow.store.tracking.sqlalchemy_store", AHEAD)) as warm:
        assert warm is not None
        with store_built_ahead(uri, warm, run_dir) as builder:
            assert builder is not None
            assert builder.wait(timeout=300) == 0
        assert _at_head(home / "mlflow.db")
        assert sorted(p.name for p in home.iterdir()) == ["mlflow.db"]
        assert not (run_dir / "store_setup.log").exists()
        built = (home / "mlflow.db").stat().st_mtime_ns
        with store_built_ahead(uri, warm, run_dir) as again:  # an existing store: nothing to build
            assert again is None
        assert (home / "mlflow.db").stat().st_mtime_ns == built
        with store_built_ahead("http://mlflow.example:5000", warm, run_dir) as remote:
            assert remote is None
    with store_built_ahead(local_tracking_uri(tmp_path / "cold"), None, run_dir) as cold:  # no server: the first
        assert cold is None                                                                # step builds it
    assert not (tmp_path / "cold").exists()


def test_the_warm_start_server_forks_the_builder_before_it_imports_mlflows_sql_tracking_store(tmp_path):
    # Asked for early, it waits for (and moves ahead) only what the build imports and itself: forked before the
    # server goes on with MLflow's SQL tracking store and KFP's executor, the build overlaps those imports and is
    # done when prepare_run opens the store, instead of starting with prepare_run and heading its set-up.
    from ctpipe.components.lib.warm_start.server import PRELOAD, needed_modules

    needs = needed_modules(["-m", AHEAD, "sqlite:///x/mlflow.db"])
    assert needs[-1] == AHEAD and PRELOAD.index(AHEAD) == max(PRELOAD.index(module) for module in needs[:-1]) + 1
    assert PRELOAD.index(AHEAD) < PRELOAD.index("mlflow.store.tracking.sqlalchemy_store")
    code = f"""
import importlib, json, sys
for module in {needs!r}:
    importlib.import_module(module)
before = set(sys.modules)
from ctpipe.components.lib.tracking.sqlite_store import ensure_store
assert ensure_store({f"sqlite:///{tmp_path / 'mlflow.db'}"!r})
print(json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("mlflow.store.tracking"))))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []  # the build needs nothing it would wait for


def test_a_local_run_imports_kfp_without_its_api_client_and_still_compiles_the_pipeline():
    # `from kfp import local` imported kfp.Client with the package: 0.3 s of the CLI before the first step.
    import subprocess
    import sys

    code = """
import os, sys
from ctpipe.pipelines.local import local_run
source = open(local_run.__file__).read()
assert source.index("kfp_without_its_client()") < source.index("from kfp import local"), "not called first"
local_run.kfp_without_its_client()
from kfp import local
from ctpipe.pipelines.continuous_training import build_pipeline
executors = build_pipeline(None).pipeline_spec.deployment_spec["executors"]
print(len(executors), "kfp.client" in sys.modules, os.environ.get("_KFP_RUNTIME"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "False", "None"]


def test_a_process_that_ran_locally_can_still_connect_to_a_kfp_host():
    # Once kfp is imported without its client, `kfp.Client` is not an attribute of the package: a process that ran
    # a pipeline locally and then deploys or submits (the watcher, a test session) must still reach the client.
    import subprocess
    import sys

    code = """
from ctpipe.pipelines.local.kfp_local_patches import kfp_without_its_client
kfp_without_its_client()
from ctpipe.pipelines.deploy.kfp_client import connect
from tests.fakes.kfp_api import FakeKfpServer
with FakeKfpServer() as server:
    client = connect(server.url)
    print(type(client).__name__)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "Client"
