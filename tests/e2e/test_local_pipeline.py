"""End to end: the real local pipeline (KFP local runner, 2 gloo ranks, MLflow on SQLite, GX).

One home is shared by the runs in order: a first model becomes champion, a second run is compared
with it, and runs on bad data fail in validation and leave the registry as it was.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from ctpipe.components.engine.progress import ProgressLine
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.tracking import local_tracking_uri

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Small but real: enough rows and steps for the model to learn, few enough to stay quick.
FAST = [
    "train.max_steps=60",
    "train.eval_every=20",
    "train.checkpoint_every=20",
    "train.warmup_steps=5",
    "evaluate.thresholds.accuracy.value=0.3",
    "data.key=customer_id",
]


def ctpipe(*args: str, home: Path, **env_vars: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CTPIPE_HOME": str(home), "MLFLOW_DISABLE_TELEMETRY": "true", **env_vars}
    return subprocess.run(
        [sys.executable, "-m", "ctpipe.pipelines.cli.main", *args], capture_output=True, text=True, env=env, timeout=900
    )


def sets(extra: list[str] | None = None) -> list[str]:
    out = []
    for item in FAST + (extra or []):
        out += ["--set", item]
    return out


def registry(home: Path):
    return mlflow.MlflowClient(tracking_uri=local_tracking_uri(home), registry_uri=local_tracking_uri(home))


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ctpipe-home")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    write_demo_data(root, days=3, rows_per_day=600, seed=1)
    return root


@pytest.fixture(scope="module")
def first_run(home, data):
    result = ctpipe("run", "--data", str(data), *sets(), home=home)
    return result


def _summary(result: subprocess.CompletedProcess) -> dict:
    last = result.stdout.strip().splitlines()[-1]
    assert last.endswith("summary.json"), result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(Path(last).read_text())


def test_first_run_succeeds_and_becomes_champion(first_run, home):
    assert first_run.returncode == 0, first_run.stdout[-3000:] + first_run.stderr[-3000:]
    summary = _summary(first_run)
    assert summary["status"] == "succeeded"
    assert all(v == "passed" for v in summary["steps"].values()), summary["steps"]
    assert len(summary["data_fingerprint"]) == 64
    assert isinstance(summary["selected_checkpoint_step"], int)
    assert summary["metrics"]["candidate"]["accuracy"] > 0.3
    assert summary["metrics"]["champion"] is None
    assert summary["blessed"] is True
    assert summary["model_version"] == "1"
    assert "champion" in summary["aliases"]
    # The progress view named every step, and the summary told how to open MLflow.
    for step in ("validate data", "sanity checks", "train", "select best checkpoint", "register"):
        assert step in first_run.stdout
    assert "mlflow ui" in first_run.stdout

    client = registry(home)
    champion = client.get_model_version_by_alias(summary["model_name"], "champion")
    assert str(champion.version) == "1"
    assert champion.tags["ctpipe.data_fingerprint"] == summary["data_fingerprint"]
    assert champion.tags["ctpipe.trigger"] == "manual"
    assert champion.tags["ctpipe.blessed"] == "true"
    # The pipeline run's MLflow run was ended by the last step (before: RUNNING forever, like a dead one).
    assert client.get_run(summary["mlflow_run_id"]).info.status == "FINISHED"


def test_first_run_shows_training_progress_and_logs_without_colour(first_run):
    """The terminal does not go quiet during training: rank 0's progress lines reach it (step of total, loss,
    throughput, ETA); the run's pipeline.log holds no ANSI colour codes (before: KFP's, throughout)."""
    progress = [ProgressLine.parse(line) for line in first_run.stdout.splitlines()]
    progress = [p for p in progress if p is not None]
    assert len(progress) >= 3, first_run.stdout[-3000:]
    assert [p.step for p in progress] == sorted({p.step for p in progress})  # each once, in order
    assert progress[-1].step == progress[-1].total == 60
    assert all(p.samples_per_second > 0 and p.loss > 0 for p in progress)
    log = (Path(_summary(first_run)["summary_path"]).parent / "pipeline.log").read_text()
    assert "\x1b[" not in log
    assert "[train] progress step 60/60" in log


def test_what_the_readme_says_the_commands_print_is_what_they_print(first_run, home, data, tmp_path):
    """README: `ctpipe run` prints each step as it starts and ends, then a summary (blessing, version and
    aliases, how to open MLflow), the path of summary.json last, exit 0 on success; `ctpipe --version`,
    `ctpipe models list` (versions with aliases and key metrics) and `ctpipe suite check` (validation alone,
    Data Docs) do what the README's examples say."""
    from ctpipe.pipelines.local.progress import STEP_TITLES

    assert first_run.returncode == 0
    out = first_run.stdout.splitlines()
    summary = json.loads(Path(out[-1]).read_text())
    ran = [STEP_TITLES[step] for step in summary["steps"]]  # the tune step only with tune.trials > 0
    for title in ran:  # (a step shorter than the 0.25 s poll may skip its "..." line)
        assert any(title in line and "passed in" in line for line in out), title
    assert sum(line.endswith("...") for line in out) >= 4  # the long steps are shown as they start
    assert out[-1].endswith("summary.json") and Path(out[-1]).is_file()
    printed = first_run.stdout[-2500:]
    assert "blessed            yes" in printed, printed
    registered = next(line for line in out if line.strip().startswith("registered"))
    assert "version 1 (aliases:" in registered and "champion" in registered, registered
    assert "workflowType=machine_learning" in printed, printed
    # The reports it names open as what they are (issue 47: KFP's output files have no extension).
    page = next(line for line in out if line.strip().startswith("validation page")).split()[-1]
    card = next(line for line in out if line.strip().startswith("model card")).split()[-1]
    assert page.endswith(".html") and Path(page).read_text().startswith("<!DOCTYPE html>"), page
    assert card.endswith(".md") and Path(card).read_text().startswith("# Model card"), card
    for path in re.findall(r"(/\S+)", first_run.stdout):
        if "pipeline_root" in path:
            assert Path(path).suffix in (".html", ".md"), f"printed without its extension: {path}"

    version = ctpipe("--version", home=home)
    assert version.returncode == 0 and version.stdout.startswith("ctpipe ")
    listed = ctpipe("models", "list", home=home)
    assert listed.returncode == 0, listed.stderr
    assert "champion" in listed.stdout and "accuracy" in listed.stdout
    checked = ctpipe("suite", "check", "--data", str(data), "--set", "data.key=customer_id",
                     "--out", str(tmp_path / "check"), home=home)
    assert checked.returncode == 0, checked.stderr[-2000:]
    assert "data validation passed" in checked.stdout
    assert checked.stdout.strip().splitlines()[-1].endswith("data_docs.html")


def test_first_run_records_each_steps_time_split_and_starts_them_warm(first_run):
    assert first_run.returncode == 0
    summary = _summary(first_run)
    assert set(summary["step_timing"]) == set(summary["steps"])
    for step, split in summary["step_timing"].items():
        assert split["compute_seconds"] >= 0 and split["import_seconds"] >= 0, step
        # Millisecond figures: their float sum may carry 1e-16 more than the recorded overhead.
        assert split["overhead_seconds"] >= split["import_seconds"] + split["setup_seconds"] - 1e-9, step
        # Forked from the warm-start server: what the process had loaded says nothing about the step.
        assert split["warm_start"] is True and split["libraries"] is None, step
    # The train step only launches the ranks: their start-up is overhead.
    assert summary["step_timing"]["train"]["setup_seconds"] > 0
    timing = summary["timing"]
    assert timing["total_seconds"] >= timing["compute_seconds"] > 0
    assert 0 < timing["orchestration_share"] < 1
    assert "cli_start_seconds" in timing["setup"]
    assert summary["step_timing"]["prepare_run"]["setup_seconds"] > 0  # the MLflow database, created there


def test_a_rerun_on_unchanged_data_reuses_the_cached_steps_and_registers_nothing_new(first_run, home, data):
    """Same data, config and code: KFP's local cache hands back validate..select; evaluate and register run
    (the champion may have moved), and the model KFP reused is not registered a second time."""
    assert first_run.returncode == 0
    second = ctpipe("run", "--data", str(data), *sets(), home=home)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    summary = _summary(second)
    assert summary["status"] == "succeeded"
    assert summary["cached_steps"] == ["validate_data", "sanity_checks", "train", "select_checkpoint"]
    assert summary["steps"]["evaluate"] == summary["steps"]["register"] == "passed"
    assert summary["compared_with_champion_version"] == "1"
    # The candidate is the champion's own model file: it scores exactly as the champion on the same test split.
    assert summary["metrics"]["candidate"]["accuracy"] == pytest.approx(summary["metrics"]["champion"]["accuracy"])
    assert summary["model_version"] == "1" and summary["registered_new_version"] is False
    assert "reused from cache" in second.stdout and "registered         nothing new" in second.stdout
    assert [str(v) for v in _versions(home, summary["model_name"])] == ["1"]
    # Both pipeline runs name the one MLflow run their cached steps logged to, which ended with them.
    first = _summary(first_run)
    assert summary["training_mlflow_run_id"] == first["training_mlflow_run_id"] != summary["mlflow_run_id"]
    assert registry(home).get_run(summary["mlflow_run_id"]).info.status == "FINISHED"
    assert registry(home).get_run(summary["training_mlflow_run_id"]).info.status == "FINISHED"
    _check_mlflow_layout(registry(home), first, summary)


def _check_mlflow_layout(client, first: dict, second: dict) -> None:
    """Issue 47: one top-level MLflow run per pipeline run (two `ctpipe run`s made three); the content run the
    cached steps log to is a child of the run that trained it; the registered version's source run carries the
    resolved config as params, the training and test metrics, and the reports."""
    experiment = client.get_run(first["mlflow_run_id"]).info.experiment_id
    runs = client.search_runs([experiment], max_results=1000)
    top = {run.info.run_id for run in runs if "mlflow.parentRunId" not in run.data.tags}
    pipeline_runs = {run.info.run_id for run in runs if "ctpipe.pipeline_run_id" in run.data.tags}
    assert top == pipeline_runs and {first["mlflow_run_id"], second["mlflow_run_id"]} <= top
    training = client.get_run(first["training_mlflow_run_id"])
    assert training.data.tags["mlflow.parentRunId"] == first["mlflow_run_id"]
    version = client.get_model_version(first["model_name"], first["model_version"])
    assert version.run_id == first["mlflow_run_id"]
    for run_id in (first["mlflow_run_id"], second["mlflow_run_id"]):  # the rerun gets the cached steps' results too
        data = client.get_run(run_id).data
        assert (data.params["train.max_steps"], data.params["data.key"]) == ("60", "customer_id"), run_id
        assert data.params["system.world_size"] == "2", run_id  # the trainer's facts, from the content run
        assert {"test_accuracy", "train_loss", "validation.errors"} <= set(data.metrics), sorted(data.metrics)
        assert data.metrics["train_loss"] == training.data.metrics["train_loss"]
        artifacts = {entry.path for entry in client.list_artifacts(run_id)}
        assert {"validation", "sanity", "evaluation", "config"} <= artifacts, artifacts
        assert "validation/data_docs.html" in {e.path for e in client.list_artifacts(run_id, "validation")}
    assert "reports" in {entry.path for entry in client.list_artifacts(first["mlflow_run_id"])}


def test_caching_off_reruns_every_step_and_compares_with_the_first_model(first_run, home, data):
    assert first_run.returncode == 0
    third = ctpipe("run", "--data", str(data), *sets(["pipeline.caching=false"]), home=home)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    summary = _summary(third)
    assert summary["cached_steps"] == [] and all(v == "passed" for v in summary["steps"].values())
    assert summary["training_mlflow_run_id"] == summary["mlflow_run_id"]  # the steps log to the run's own
    assert summary["compared_with_champion_version"] == "1"
    # Same data, same seeds: the retrained candidate scores exactly as the first on the same test split; its
    # export is another file (a new version).
    assert summary["metrics"]["candidate"]["accuracy"] == pytest.approx(summary["metrics"]["champion"]["accuracy"])
    assert summary["model_version"] == "2" and summary["registered_new_version"] is True


def _versions(home: Path, name: str) -> list[str]:
    return sorted(v.version for v in registry(home).search_model_versions(f"name='{name}'"))


def test_bad_data_fails_in_validation_and_leaves_the_champion(first_run, home, data, tmp_path):
    assert first_run.returncode == 0
    name = _summary(first_run)["model_name"]
    before_versions = _versions(home, name)
    before_champion = registry(home).get_model_version_by_alias(name, "champion").version

    bad = tmp_path / "bad"
    write_demo_data(bad, days=2, rows_per_day=300, seed=2)
    part = next(bad.glob("date=*/part-0.parquet"))
    frame = pd.read_parquet(part)
    # A text column where numbers are expected: a few values are words, the rest digits as text.
    frame["tenure_months"] = frame["tenure_months"].astype(str)
    frame.loc[frame.index[:5], "tenure_months"] = "twelve"
    frame.to_parquet(part, index=False)

    # Cold (every step a fresh interpreter, as a pod): each step record shows what its process loaded.
    result = ctpipe("run", "--data", str(bad), *sets(), home=home, CTPIPE_WARM_START="0")
    assert result.returncode != 0
    summary = _summary(result)
    assert summary["steps"]["validate_data"] == "failed"
    libraries = {step: split["libraries"] for step, split in summary["step_timing"].items()}
    assert not any(split["warm_start"] for split in summary["step_timing"].values())
    assert "mlflow" in libraries["prepare_run"]
    assert not {"torch", "great_expectations"} & set(libraries["prepare_run"])
    assert "torch" not in libraries["validate_data"]
    assert summary["steps"]["train"] == "skipped" and summary["steps"]["register"] == "skipped"
    assert "tenure_months" in summary["error"]["message"]
    # The message names the report and the Data Docs page with their extensions, as files that exist.
    named = re.findall(r"(/\S+?\.(?:md|html))(?=[.\s]|$)", summary["error"]["message"])
    assert sorted(Path(p).suffix for p in named) == [".html", ".md"] and all(Path(p).is_file() for p in named)
    assert "Traceback" not in result.stdout + result.stderr
    assert _versions(home, name) == before_versions
    assert registry(home).get_model_version_by_alias(name, "champion").version == before_champion
    # The failing step ended the run's MLflow run as FAILED.
    assert registry(home).get_run(summary["mlflow_run_id"]).info.status == "FAILED"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--data", "/definitely/not/here"], "does not exist"),
        (["--set", "train.nope=1"], "train.nope"),
        (["--set", "train.max_steps=-3"], "train.max_steps"),
    ],
)
def test_user_errors_are_one_paragraph_without_traceback(tmp_path, args, needle):
    result = ctpipe("run", *args, home=tmp_path / "h")
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_missing_label_column_is_named(home, data, tmp_path):
    result = ctpipe("run", "--data", str(data), *sets(["data.label=target"]), home=tmp_path / "h2")
    assert result.returncode != 0
    assert "Traceback" not in result.stdout + result.stderr
    assert "'target'" in result.stdout + result.stderr


def test_a_full_disk_in_the_register_step_fails_the_run_named_and_retryable(data, tmp_path):
    """Before: a raw `OSError: [Errno 28]` traceback naming no step, the register record "running" for ever, the
    MLflow run RUNNING, and summary.json left at 0 bytes. The full disk is the test-only step fault."""
    home = tmp_path / "h"
    result = ctpipe("run", "--data", str(data), *sets(), home=home, CTPIPE_TEST_STEP_FAULT="disk_full@register")
    assert result.returncode != 0
    summary = _summary(result)
    assert summary["status"] == "failed" and summary["steps"]["register"] == "failed"
    error = summary["error"]
    assert error["step"] == "register" and error["user_error"] is False  # infrastructure: the watcher retries it
    assert "step 'register' could not write '" in error["message"] and "no space left on device" in error["message"]
    record = json.loads((Path(summary["run_dir"]) / "steps" / "register.json").read_text())
    assert record["status"] == "failed"
    assert registry(home).get_run(summary["mlflow_run_id"]).info.status == "FAILED"
