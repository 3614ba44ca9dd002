"""End to end: `ctpipe run --runner container` on the demo data, each step in the built component image
through KFP's DockerRunner on podman's socket, as a cluster runs it.

Needs podman and the images of ci/build_images.sh (tests/fixtures/images.py): skipped without them, except
where CTPIPE_REQUIRE_IMAGES=1 (.ci/run) makes that a failure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.images import built_image, podman_env

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST = ["data.key=customer_id", "train.max_steps=30", "train.eval_every=15", "train.checkpoint_every=15",
        "train.warmup_steps=3", "evaluate.thresholds.accuracy.value=0.3"]


@pytest.fixture(scope="module")
def container_run(tmp_path_factory):
    image = built_image("component")
    home = tmp_path_factory.mktemp("container-home")
    sets = [arg for item in FAST for arg in ("--set", item)]
    result = subprocess.run(
        [sys.executable, "-m", "ctpipe.pipelines.cli.main", "run", "--runner", "container", "--image", image,
         "--home", str(home), *sets],
        capture_output=True, text=True, timeout=1500,
        env={**podman_env(), "MLFLOW_DISABLE_TELEMETRY": "true"},
    )
    return image, home, result


def test_the_demo_runs_with_every_step_in_the_image(container_run):
    image, home, result = container_run
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    summary = json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())
    assert summary["status"] == "succeeded"
    assert set(summary["steps"].values()) == {"passed"}, summary["steps"]
    # The registered model's lineage names the image its steps ran in (CTPIPE_IMAGE, set only in the image).
    lineage = next(home.glob("mlartifacts/**/ctpipe/lineage.json"))
    assert json.loads(lineage.read_text())["image"] == image


def test_the_steps_wrote_as_the_images_user_and_left_no_container(container_run):
    image, home, result = container_run
    assert result.returncode == 0
    # What the steps wrote; .kfp_cache is the local runner's own cache, written by this process (KFP's database
    # on a cluster).
    root = home / "pipeline_root"
    written = [p for p in root.rglob("*") if p.is_file() and p.relative_to(root).parts[0] != ".kfp_cache"]
    if os.geteuid() == 0:  # rootful podman: the files belong to the image's user, 10001, as in a pod
        assert written and {p.stat().st_uid for p in written} == {10001}
    left = subprocess.run(["podman", "ps", "-aq", "--filter", "label=io.ctpipe.run"], capture_output=True, text=True,
                          env=podman_env())
    assert left.stdout.split() == []
