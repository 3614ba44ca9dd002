"""End to end: the user's digits task (examples/digits) through the real local pipeline, twice.

The task lives outside the package and reaches every step (KFP local runner subprocesses, the torchrun
workers) through PYTHONPATH, as a user's installed package would through the image.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits"
# Tiny but real: 900 images, 30 steps of a width-8 CNN, a small sanity sample.
SETS = [
    "data.key=id", "task.entrypoint=digits_task:make_task", "task.options.width=8",
    "train.max_steps=30", "train.warmup_steps=3", "train.eval_every=15", "train.checkpoint_every=15",
    "train.batch_size=32", "train.lr=0.01",
    "sanity.sample_rows=256", "sanity.overfit_steps=150", "sanity.short_train_steps=30",
    "evaluate.bootstrap_samples=300",
    # 30 steps prove the pipeline, not the model: a logistic regression on the 64 pixels beats such a CNN, and a
    # first model that loses clearly to it is not blessed (issue 48); the README's run trains 100 steps.
    "evaluate.beat_linear=false",
]


def ctpipe(*args: str, home: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(EXAMPLE), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "CTPIPE_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true", "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "ctpipe.pipelines.cli.main", *args], capture_output=True, text=True, env=env,
                          timeout=900)


def run(data: Path, home: Path, *extra: str) -> dict:
    sets = [x for item in (*SETS, *extra) for x in ("--set", item)]
    result = ctpipe("run", "--data", str(data), *sets, home=home)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(Path(result.stdout.strip().splitlines()[-1]).read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    written = subprocess.run([sys.executable, str(EXAMPLE / "write_partitions.py"), str(root / "data"), "--days", "3",
                              "--rows", "900"], capture_output=True, text=True, check=True)
    assert len(written.stdout.split()) == 3
    home = root / "home"
    # The second without the cache: the same data and config would otherwise reuse the first run's model.
    return home, run(root / "data", home), run(root / "data", home, "pipeline.caching=false")


def test_every_step_passes_and_the_sanity_gate_ran_on_the_cnn(runs):
    _, first, _ = runs
    assert first["status"] == "succeeded"
    assert all(v == "passed" for v in first["steps"].values()), first["steps"]
    sanity = first["sanity"]
    assert sanity["passed"] and not sanity.get("skipped")
    assert first["blessed"] and first["model_version"] == "1"


def test_the_second_run_is_compared_with_the_first_as_champion(runs):
    _, _, second = runs
    assert all(v == "passed" for v in second["steps"].values()), second["steps"]
    assert second["compared_with_champion_version"] == "1"
    assert second["model_version"] == "2"


def test_models_lists_the_user_tasks_versions(runs):
    home, _, _ = runs
    # The task registers under its own name (its config_defaults), as the README's models command says.
    listed = ctpipe("models", "list", "--home", str(home), "--model-name", "ctpipe-digits", "--json", home=home)
    assert listed.returncode == 0, listed.stderr
    versions = {str(v["version"]) for v in json.loads(listed.stdout)}
    assert {"1", "2"} <= versions


def test_render_job_shows_the_entrypoint_reaching_the_trainer_pods(tmp_path):
    rendered = ctpipe("render-job", "--set", "task.entrypoint=digits_task:make_task", "--set", "task.options.width=8",
                      "--set", "train.backend=pytorchjob", home=tmp_path)  # auto would print both jobs
    assert rendered.returncode == 0, rendered.stderr
    import yaml

    job = yaml.safe_load(rendered.stdout)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        command = replica["template"]["spec"]["containers"][0]["command"]
        config = json.loads(command[command.index("--config-json") + 1])
        assert config["task"] == {"name": "tabular_classification", "entrypoint": "digits_task:make_task",
                                  "options": {"width": 8}}
