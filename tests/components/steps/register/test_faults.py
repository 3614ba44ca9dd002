"""A registration killed (SIGKILL) at any point leaves no half-registered version, and the retry completes.

The kill comes from the registration's test-only fault hook (CTPIPE_TEST_REGISTRATION_FAULT) in a child
process; the retry is what the watcher's next attempt does: a new pipeline run registering again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
from ctpipe.components.steps.register.register import register_candidate
from ctpipe.testing.faults import REGISTRATION_FAULT_ENV
from tests.fixtures.registry import fast_config, make_model, make_run, make_snapshot

CHILD = """
import json, sys
from ctpipe.components.lib.config import Config
from ctpipe.components.steps.register.register import register_candidate
kwargs = json.loads(sys.argv[1])
config = Config.from_json(kwargs.pop("config_json"))
register_candidate(config=config, **kwargs)
"""


@pytest.fixture(scope="module")
def snap(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    snapshot = make_snapshot(root)
    return snapshot, make_model(snapshot, root / "m.pt", steps=80, seed=0)


def _prepared(snap, home, pipeline_run_id: str, config) -> dict:
    snapshot, model = snap
    uri = local_tracking_uri(home)
    run_id = make_run(uri, config, pipeline_run_id)
    blessing, card = home / f"{pipeline_run_id}.json", home / f"{pipeline_run_id}.md"
    evaluate_candidate(
        str(model), str(snapshot), config, tracking_uri=uri, mlflow_run_id=run_id,
        blessing_path=str(blessing), card_path=str(card),
    )  # fmt: skip
    return {
        "model_path": str(model), "snapshot_dir": str(snapshot), "blessing_path": str(blessing), "tracking_uri": uri,
        "mlflow_run_id": run_id, "pipeline_run_id": pipeline_run_id, "trigger": "new_data",
        "reports": {"model_card": str(card)},
    }  # fmt: skip


@pytest.mark.parametrize("point", ["after_artifacts", "after_create", "in_promotion_lock"])
def test_a_registration_killed_midway_leaves_only_complete_versions_and_a_retry_promotes(snap, tmp_path, point):
    config = fast_config(lock_ttl_seconds=2.0)
    attempt1 = _prepared(snap, tmp_path, "p-attempt-1", config)
    env = {**os.environ, REGISTRATION_FAULT_ENV: point}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps({**attempt1, "config_json": config.to_json()})],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]

    registry = Registry(attempt1["tracking_uri"], config.registry)
    left = registry.versions()
    assert len(left) == (0 if point == "after_artifacts" else 1)
    assert all(v.tags.get(COMPLETE_TAG) == "complete" and v.tags.get("ctpipe.data_fingerprint") for v in left)
    assert registry.alias_version("champion") is None

    # The watcher's next attempt is a new pipeline run: it registers again and, blessed, is promoted
    # (after an abandoned promotion lock expires: registry.lock_ttl_seconds).
    attempt2 = _prepared(snap, tmp_path, "p-attempt-2", config)
    result = register_candidate(config=config, **attempt2)
    assert result.promoted and registry.alias_version("champion") == result.version
    assert [e["version"] for e in registry.champion_history()] == [result.version]
    versions = registry.versions()
    assert all(v.tags.get(COMPLETE_TAG) == "complete" for v in versions)
    # The same model file is never registered twice: a complete version the killed attempt left is the one
    # the retry promotes (issue 32); without one, the retry creates it.
    assert len(versions) == 1
    assert result.version == str(left[0].version if left else versions[0].version)
