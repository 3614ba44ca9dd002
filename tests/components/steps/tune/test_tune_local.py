"""The search with real trials: each a training job of local processes, its values read by the worker from
KUBEFLOW_TRAINER_OPT_* variables, judged on validation without ever reading the test split, a diverged trial
recorded and never chosen, every trial an MLflow child run, and the report a person reads."""

from __future__ import annotations

import json
import re
import shutil

import mlflow
import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.tracking import ensure_experiment
from ctpipe.components.lib.warm_start import running_server
from ctpipe.components.run_config import load_config
from ctpipe.components.run_config.trial import check_chosen_passed_gate
from ctpipe.components.steps.tune.gating import gate_outcomes
from ctpipe.components.steps.tune.trials import TrialOutcome
from ctpipe.components.steps.tune.tune import choose, tune_hyperparameters
from ctpipe.pipelines.local.train_alone import build_snapshot

TINY = ["data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.workers=1",
        "train.max_steps=40", "train.eval_every=3", "train.batch_size=16", "train.timeout_minutes=2",
        "train.threads_per_worker=1"]
GATE = ["sanity.sample_rows=256"]  # the gate's checks on a smaller sample: seconds a trial, as a test should take
SEARCH = ["tune.trials=3", "tune.trial_steps=6", "tune.parallel_trials=2", "tune.sampler=grid",
          'tune.space={train.lr: "choice(0.01, 0.05)"}']


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    """A snapshot whose test split is unreadable garbage: a trial that read it would fail."""
    root = tmp_path_factory.mktemp("tune")
    write_demo_data(root / "data", days=2, rows_per_day=200, seed=1)
    build_snapshot(str(root / "data"), load_config(None, TINY), root / "snapshot")
    test_split = root / "snapshot" / "test.parquet"
    assert test_split.stat().st_size > 0
    test_split.write_bytes(b"not parquet: the test split is never read by a trial\n" * 64)
    return str(root / "snapshot")


# A trial is two processes (its launcher, its rank), each importing torch or ctpipe: forked warm, as `ctpipe run`
# starts them, the module's searches take seconds instead of a minute on a loaded 2-core machine.
TRIAL_MODULES = ("torch", "mlflow", "mlflow.store.tracking.sqlalchemy_store", "ctpipe.components.tasks.tabular",
                 "ctpipe.components.engine.tracker", "ctpipe.components.steps.train.launch",
                 "ctpipe.components.steps.train.worker", "ctpipe.components.steps.sanity_checks.trial_gate")


@pytest.fixture(scope="module", autouse=True)
def warm():
    with running_server(preload=TRIAL_MODULES) as server:
        yield server


@pytest.fixture(scope="module")
def searched(snapshot_dir, tmp_path_factory):
    """Three trials (the configured lr 0.003, then 0.01 and 0.05), the one at lr=0.05 made to diverge."""
    root = tmp_path_factory.mktemp("search")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    parent = mlflow.MlflowClient(uri).create_run(ensure_experiment(uri, "ctpipe-test")).info.run_id
    config = load_config(None, TINY + GATE + SEARCH)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("CTPIPE_TEST_FAULT", "nan@1")
        patch.setenv("CTPIPE_TEST_FAULT_WHEN", "KUBEFLOW_TRAINER_OPT_TRAIN_LR=0.05")
        result = tune_hyperparameters(snapshot_dir, str(root / "trials"), config, tracking_uri=uri, mlflow_run_id=parent,
                                      job_name="search", report_path=str(root / "report.html"))
    return result, root, uri, parent


def test_trials_train_with_their_values_and_a_diverged_one_is_never_chosen(searched):
    result, root, _, _ = searched
    assert [(o.values["train.lr"], o.status) for o in result.outcomes] == [
        (0.003, "succeeded"), (0.01, "succeeded"), (0.05, "diverged")]
    assert result.outcomes[0].baseline and "non-finite loss" in result.outcomes[2].error
    # A healthy space: every trial's values passed the sanity gate and trained; the chosen one says so.
    assert [o.gate for o in result.outcomes] == ["passed", "passed", "passed"]
    assert result.summary["chosen"]["gate"] == result.config.tune.chosen["chosen"]["gate"] == "passed"
    assert all(o.steps == 6 and o.objective is not None for o in result.outcomes[:2])
    chosen = max(result.outcomes[:2], key=lambda o: (o.objective, -o.index))
    assert result.chosen == chosen and result.summary["chosen"]["values"] == {"train.lr": chosen.values["train.lr"]}
    assert result.summary["chosen"]["objective"] >= result.summary["baseline_objective"]
    # Training gets the chosen values at its own budget, and the search travels with them into the lineage.
    assert (result.config.train.lr, result.config.train.max_steps) == (chosen.values["train.lr"], 40)
    assert [t["status"] for t in result.config.tune.chosen["search"]] == ["succeeded", "succeeded", "diverged"]
    # The trials' checkpoints go once the search is over; each folder keeps its outcome and log.
    folders = sorted(f for f in (root / "trials").iterdir() if f.name != "sanity-gate")  # the gate's own log
    assert [f.name for f in folders] == ["trial-000", "trial-001", "trial-002"]
    assert all(not (f / "checkpoints").exists() and (f / "outcome.json").is_file() for f in folders)


def test_no_trial_reads_the_test_split(searched, snapshot_dir):
    """The test split is garbage (fixture): every trial that was not made to diverge succeeded on the others."""
    result, _, _, _ = searched
    assert [o.status for o in result.outcomes if o.values["train.lr"] != 0.05] == ["succeeded", "succeeded"]
    with pytest.raises(Exception):  # noqa: B017 (any reader's error: the file is no Parquet)
        import pyarrow.parquet as pq

        pq.read_table(f"{snapshot_dir}/test.parquet")


def test_each_trial_is_a_child_run_with_its_own_values_and_curve(searched):
    result, _, uri, parent = searched
    client = mlflow.MlflowClient(uri)
    for outcome in result.outcomes:
        run = client.get_run(outcome.mlflow_run_id)
        assert run.data.tags["mlflow.parentRunId"] == parent
        assert float(run.data.params["train.lr"]) == outcome.values["train.lr"]  # logged by the trial's rank 0
        assert run.info.status == ("FINISHED" if outcome.status == "succeeded" else "FAILED")
        assert run.data.tags["ctpipe.tune.status"] == outcome.status
    curve = client.get_metric_history(result.outcomes[0].mlflow_run_id, "val_accuracy")
    assert [m.step for m in curve] == [3, 6]
    tags = client.get_run(parent).data.tags
    assert json.loads(tags["ctpipe.tune.chosen"]) == result.summary["chosen"]["values"]


def test_the_report_lists_every_trial_with_an_axis_plot_per_hyperparameter(searched):
    _, root, _, _ = searched
    page = (root / "report.html").read_text()
    rows = re.findall(r"<tr(?: class='chosen')?><td>(\d+)</td>", page)
    assert rows == ["0", "1", "2"]
    assert len(re.findall(r"<img alt='val_accuracy against train.lr' src='data:image/png;base64,", page)) == 1
    assert "diverged" in page and "configured values" in page and "nuisance" in page


def test_a_search_without_a_successful_trial_fails_the_step(snapshot_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "nan@1")
    config = load_config(None, TINY + GATE + ["tune.trials=1", "tune.trial_steps=3", 'tune.space={train.lr: "choice(0.01)"}'])
    with pytest.raises(TrainingError, match="no trial succeeded.*non-finite"):
        tune_hyperparameters(snapshot_dir, str(tmp_path / "trials"), config, tracking_uri=None, mlflow_run_id=None,
                             job_name="none", report_path=str(tmp_path / "report.html"))
    assert "No trial succeeded" in (tmp_path / "report.html").read_text()
    shutil.rmtree(tmp_path / "trials")


def test_a_trial_the_sanity_gate_refuses_is_recorded_never_trained_nor_chosen(snapshot_dir, tmp_path):
    """lr=9 is a valid config, but the gate's training checks cannot train at it: the gate's checks refuse the trial before
    it trains, its record carries the gate's message, the configured values are chosen, and training accepts them.
    A retried step keeps both verdicts without gating or training again."""
    config = load_config(None, TINY + GATE + ["tune.trials=2", "tune.trial_steps=3", "tune.sampler=grid",
                                              'tune.space={train.lr: "choice(9.0)"}'])
    work, uri = tmp_path / "trials", f"sqlite:///{tmp_path / 'mlflow.db'}"
    parent = mlflow.MlflowClient(uri).create_run(ensure_experiment(uri, "ctpipe-test")).info.run_id
    result = tune_hyperparameters(snapshot_dir, str(work), config, tracking_uri=uri, mlflow_run_id=parent,
                                  job_name="gated", report_path=str(tmp_path / "report.html"))
    assert [(o.values, o.status, o.gate) for o in result.outcomes] == [
        ({"train.lr": 0.003}, "succeeded", "passed"), ({"train.lr": 9.0}, "gate_failed", "failed")]
    refused = result.outcomes[1]
    assert refused.error.startswith("the sanity gate refused these values (") and "sanity check '" in refused.error
    assert refused.objective is None and not (work / "trial-001" / "trial.log").exists()  # never trained
    assert result.chosen.index == 0 and result.summary["chosen"]["gate"] == "passed"
    assert result.summary["gate_seconds"] > 0  # what the trials' gate took, all of them
    assert [t["gate"] for t in result.config.tune.chosen["search"]] == ["passed", "failed"]
    check_chosen_passed_gate(result.config)  # what the train step checks before it launches anything
    run = mlflow.MlflowClient(uri).get_run(refused.mlflow_run_id)  # its child run says why it never trained
    assert run.info.status == "FAILED" and run.data.tags["ctpipe.tune.status"] == "gate_failed"
    assert run.data.tags["ctpipe.tune.error"].startswith("the sanity gate refused these values")
    page = (tmp_path / "report.html").read_text()
    assert "1 gate_failed" in page and "the sanity gate refused these values" in page
    gated = (work / "sanity-gate" / "gate.log").stat().st_mtime_ns
    again = tune_hyperparameters(snapshot_dir, str(work), config, tracking_uri=uri, mlflow_run_id=parent,
                                 job_name="gated")
    assert [(o.status, o.gate) for o in again.outcomes] == [("succeeded", "passed"), ("gate_failed", "failed")]
    assert (work / "sanity-gate" / "gate.log").stat().st_mtime_ns == gated and again.chosen.index == 0


def test_trials_whose_values_were_drawn_elsewhere_are_gated_before_one_is_chosen(snapshot_dir, tmp_path):
    """Katib draws its trials' values itself, so they are gated once known: a succeeded trial at a rate the gate
    refuses becomes gate_failed (its objective kept for the record) and the choice passes over it."""
    def outcome(index, lr, objective, status="succeeded"):
        return TrialOutcome(index=index, values={"train.lr": lr}, status=status, job_name=f"k-{index}",
                            objective=objective)

    drawn = [outcome(0, 0.003, 0.5), outcome(1, 9.0, 0.9), outcome(2, 0.05, None, "diverged")]
    gated = gate_outcomes(drawn, snapshot_dir, load_config(None, TINY + GATE), tmp_path)
    assert [(o.status, o.gate) for o in gated] == [("succeeded", "passed"), ("gate_failed", "failed"), ("diverged", None)]
    assert gated[1].objective == 0.9 and "the sanity gate refused these values" in gated[1].error
    assert choose(gated, "max").index == 0
    assert (tmp_path / "trial-001" / "gate" / "sanity.md").is_file()  # the gate's report on the refused values
