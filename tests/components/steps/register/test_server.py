"""Against a real local `mlflow server`: a promotion race between processes, and a server that is down."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time

import mlflow
import pytest

from ctpipe.components.lib.config import Threshold
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG
from ctpipe.components.lib.tracking.retry import RegistryUnavailableError
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.testing.mlflow_server import LocalMlflowServer, free_port
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    root = tmp_path_factory.mktemp("server-data")
    snapshot = make_snapshot(root, rows_per_day=400)
    return {
        "root": root,
        "snap": snapshot,
        "models": [make_model(snapshot, root / f"m{i}.pt", steps=60, seed=i) for i in range(5)],
    }


def _evaluate(uri, snap, i, config, work):
    run_id = make_run(uri, config, f"p{i}")
    blessing, card = work / f"b{i}.json", work / f"c{i}.md"
    evaluate_candidate(
        str(snap["models"][i]),
        str(snap["snap"]),
        config,
        tracking_uri=uri,
        mlflow_run_id=run_id,
        blessing_path=str(blessing),
        card_path=str(card),
    )
    return {
        "model_path": str(snap["models"][i]), "snapshot_dir": str(snap["snap"]), "blessing_path": str(blessing),
        "tracking_uri": uri, "mlflow_run_id": run_id, "pipeline_run_id": f"p{i}", "trigger": "schedule",
        "reports": {"model_card": str(card)},
    }  # fmt: skip


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # One server for the module: a start costs ~7 s idle and over 30 s on a loaded 2-core machine.
    running = LocalMlflowServer(tmp_path_factory.mktemp("server")).start()
    yield running
    running.stop()


def test_concurrent_promotions_end_with_one_consistent_champion(snap, server, tmp_path):
    config = fast_config(retries=5)
    config.evaluate.thresholds = {"accuracy": Threshold(value=0.0)}  # every candidate is blessed
    first = _evaluate(server.uri, snap, 0, config, tmp_path)
    assert register_candidate(config=config, **first).aliases == ["challenger", "champion"]
    jobs = [_evaluate(server.uri, snap, i, config, tmp_path) for i in range(1, 4)]
    for job in jobs:
        assert (
            json.loads((tmp_path / f"b{job['pipeline_run_id'][1:]}.json").read_text())["champion_version"]
            == "1"
        )
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(jobs))
    outs = [tmp_path / f"out{i}.json" for i in range(len(jobs))]
    procs = [
        ctx.Process(target=_child, args=({**job, "config_json": config.to_json()}, barrier, str(out)))
        for job, out in zip(jobs, outs, strict=True)
    ]
    for p in procs:
        p.start()
    for p in procs:
        # Each registration serves its candidate in a fresh interpreter first (the serving check): minutes when
        # three run at once on a loaded two-core machine.
        p.join(timeout=600)
    results = [json.loads(out.read_text()) for out in outs]
    assert not [r for r in results if "error" in r], results
    winners = [r for r in results if r["promoted"]]
    assert len(winners) == 1, results
    winner = winners[0]["version"]
    for loser in (r for r in results if not r["promoted"]):
        assert (
            f"champion changed from version 1 (the one this candidate was evaluated against) to version {winner}"
            in loser["promotion_reason"]
        )
    registry = Registry(server.uri, config.registry)
    assert registry.alias_version("champion") == winner
    versions = registry.versions()
    assert sorted(int(v.version) for v in versions) == [1, 2, 3, 4]
    assert all(
        v.tags.get(COMPLETE_TAG) == "complete" and v.tags.get("ctpipe.data_fingerprint") for v in versions
    )
    assert registry.champion_stack() == ["1", winner]
    assert [e["kind"] for e in registry.champion_history()] == ["auto", "auto"]
    # The lock is released: no registered model besides ours is left.
    names = {
        m.name for m in mlflow.MlflowClient(server.uri, registry_uri=server.uri).search_registered_models()
    }
    assert not [n for n in names if n.endswith("--promotion-lock")]


def _child(kwargs, barrier, out):
    from tests.fixtures.registry import register_in_child

    register_in_child(kwargs, barrier, out)


def test_server_down_fails_clearly_after_bounded_retries(snap, tmp_path):
    config = fast_config(retries=2, retry_backoff_seconds=0.2)
    (tmp_path / "b.json").write_text(json.dumps({"blessed": True, "reasons": [], "champion_version": None}))
    uri = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError, match=r"3 attempts over .*s failed"):
        register_candidate(
            str(snap["models"][0]), str(snap["snap"]), str(tmp_path / "b.json"), config, tracking_uri=uri,
            mlflow_run_id="0" * 32, pipeline_run_id="p", trigger="manual", reports={},
        )  # fmt: skip
    assert time.monotonic() - started < 15


def test_server_down_then_up_registers_exactly_once(snap, server, tmp_path):
    # A generous budget: a restart takes ~7 s idle, much longer when the machine is busy.
    config = fast_config(retries=60, retry_backoff_seconds=0.5, retry_max_backoff_seconds=2.0)
    config.registry.model_name = "down-then-up"
    config.evaluate.beat_linear = False  # this test is the retry's; its small model may lose to the linear baseline
    job = _evaluate(server.uri, snap, 0, config, tmp_path)
    server.stop()
    restarted = threading.Timer(1.0, server.start)
    restarted.start()
    try:
        result = register_candidate(config=config, **job)
        assert result.version == "1" and result.promoted and "champion" in result.aliases
        registry = Registry(server.uri, config.registry)
        assert len(registry.versions()) == 1
        assert registry.get_version("1").tags[COMPLETE_TAG] == "complete"
    finally:
        restarted.join()
