"""The real trainer: two gloo worker processes on CPU, a tiny model, a few steps.

Covers exact resume after a kill, a crash during a save, NaN injection, a failing rank, MLflow from
rank 0, and retention on disk. Faults come from the worker's test-only CTPIPE_TEST_FAULT hook.
"""

from __future__ import annotations

import json
import math
import sys
import time

import mlflow
import pytest

from ctpipe.components.engine import checkpointing as ckpt
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import TrainingError
from ctpipe.components.lib.tracking import ensure_experiment
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.select_checkpoint.select import select_and_export
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.base import WorkerLaunch
from ctpipe.components.steps.train.launchers.local import LocalLauncher
from ctpipe.components.tasks.export import load_model_export
from ctpipe.pipelines.local.train_alone import build_snapshot
from tests.fixtures.damage import a_model_shard, flip_bytes
from tests.fixtures.exact import EXACT_TRAINING

# Resumed runs are compared with the uninterrupted one bit for bit: EXACT_TRAINING pins what makes that exact.
TINY = [
    *EXACT_TRAINING,
    "data.key=customer_id",
    "model.hidden=16",
    "model.depth=2",
    "model.embedding_dim=4",
    "model.dropout=0.1",
    "train.workers=2",
    "train.max_steps=8",
    "train.warmup_steps=2",
    "train.eval_every=2",
    "train.checkpoint_every=2",
    "train.batch_size=16",
    "train.keep_best=1",
    "train.timeout_minutes=2",
]


def tiny_config(*extra: str):
    return load_config(None, TINY + list(extra))


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("train")
    write_demo_data(root / "data", days=2, rows_per_day=200, seed=1)
    build_snapshot(str(root / "data"), tiny_config(), root / "snapshot")
    return str(root / "snapshot")


@pytest.fixture(scope="module")
def reference(snapshot_dir, tmp_path_factory):
    """One uninterrupted run, logging into MLflow on SQLite from rank 0."""
    root = tmp_path_factory.mktemp("reference")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    exp = ensure_experiment(uri, "ctpipe-test")
    run_id = mlflow.MlflowClient(uri).create_run(exp).info.run_id
    result = train_model(
        snapshot_dir,
        str(root / "ckpt"),
        tiny_config(),
        tracking_uri=uri,
        mlflow_run_id=run_id,
        job_name="ref",
    )
    return result, root / "ckpt", uri, run_id


def _train(snapshot_dir, ckpt_dir, *extra):
    return train_model(
        snapshot_dir, str(ckpt_dir), tiny_config(*extra), tracking_uri=None, mlflow_run_id=None, job_name="t"
    )


def test_uninterrupted_run_keeps_best_plus_latest_and_logs_to_mlflow(reference):
    result, ckpt_dir, uri, run_id = reference
    assert result.steps == 8 and result.world_size == 2 and result.samples_per_second > 0 and result.mfu > 0
    index = json.loads((ckpt_dir / "index.json").read_text())
    assert [e["step"] for e in index["checkpoints"]] == [2, 4, 6, 8]
    on_disk = {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(ckpt_dir)}
    assert on_disk == {index["best_step"], 8}
    assert all(ckpt.is_complete(ckpt.checkpoint_path(ckpt_dir, s)) for s in on_disk)
    run = mlflow.MlflowClient(uri).get_run(run_id)
    assert run.data.params["train.lr"] and run.data.params["system.world_size"] == "2"
    assert run.data.params["system.threads_per_worker"] == "1"  # the pin reached the ranks: exact resume needs it
    assert run.data.params["train.effective_batch_size"] == "32"
    history = mlflow.MlflowClient(uri).get_metric_history(run_id, "val_accuracy")
    assert [m.step for m in history] == [2, 4, 6, 8]
    assert {"lr", "grad_norm", "train_loss", "samples_per_second", "mfu", "clip_rate"} <= set(
        run.data.metrics
    )
    assert any(a.path == "training" for a in mlflow.MlflowClient(uri).list_artifacts(run_id))


def test_step_metrics_go_to_mlflow_once_per_logging_window_not_once_per_step(reference):
    """Per-step points sent mid-loop slowed every step (benchmarks/trainer.py): the gradient norm (mean and max)
    and the learning rate are logged with the window's train loss; an 8-step run is one window."""
    from ctpipe.components.engine.trainer import LOG_EVERY

    _, _, uri, run_id = reference
    client = mlflow.MlflowClient(uri)
    assert LOG_EVERY > 8
    histories = {k: client.get_metric_history(run_id, k) for k in ("grad_norm", "grad_norm_max", "lr", "train_loss")}
    assert {k: [m.step for m in h] for k, h in histories.items()} == {k: [8] for k in histories}
    mean, peak = histories["grad_norm"][0].value, histories["grad_norm_max"][0].value
    assert 0 < mean <= peak
    assert 0 < histories["lr"][0].value <= float(client.get_run(run_id).data.params["train.lr"])


def test_retention_and_the_best_step_follow_a_loss_metric(snapshot_dir, tmp_path):
    """select.metric=val_loss alone: the trainer keeps and indexes the LOWEST loss, not the highest."""
    result = _train(snapshot_dir, tmp_path, "select.metric=val_loss")
    index = json.loads((tmp_path / "index.json").read_text())
    losses = {e["step"]: e["metrics"]["val_loss"] for e in index["checkpoints"]}
    lowest = min(losses, key=losses.get)
    assert index["mode"] == "min" and index["best_step"] == lowest
    assert {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)} == {lowest, 8}
    assert result.best_step == lowest and result.best_metric_name == "val_loss"


def test_crash_in_a_save_then_a_kill_then_resume_is_bit_identical(
    reference, snapshot_dir, tmp_path, monkeypatch
):
    # 1. Rank 0 dies in the middle of step 4's save (shards written, no marker): step 2 stays the latest.
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "save_crash@4:0")
    with pytest.raises(TrainingError, match="rank 0 exited with code 18"):
        _train(snapshot_dir, tmp_path)
    partial = ckpt.checkpoint_path(tmp_path, 4)
    assert partial.is_dir() and not ckpt.is_complete(partial)
    assert ckpt.step_of(ckpt.latest_complete(tmp_path)) == 2

    # 2. Resumed from step 2, rank 1 is killed abruptly before step 8; the survivor is stopped. Step 4's save is
    # complete (step 6's waited for it); step 6's runs beside the steps after it, so it may or may not be marked.
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "exit@7:1")
    with pytest.raises(TrainingError, match="rank 1 exited with code 17"):
        _train(snapshot_dir, tmp_path)
    latest = ckpt.step_of(ckpt.latest_complete(tmp_path))
    assert latest in (4, 6) and ckpt.is_complete(partial)

    # 3. Resumed from the latest complete save to the end: the same weights, bit for bit, as the uninterrupted run.
    monkeypatch.delenv("CTPIPE_TEST_FAULT")
    resumed = _train(snapshot_dir, tmp_path)
    assert resumed.resumed_from_step == latest and resumed.steps == 8
    assert resumed.final_weights_sha256 == reference[0].final_weights_sha256


def test_a_damaged_checkpoint_is_skipped_with_a_warning_and_resume_falls_back_bit_exactly(
    reference, snapshot_dir, tmp_path, capfd
):
    """Before: 256 flipped bytes in a shard of the latest complete checkpoint, then a restart on the same
    directory: resumed from it silently, ended with other weights, and the index kept its old metric."""
    _train(snapshot_dir, tmp_path, "train.keep_best=2")
    damaged = ckpt.checkpoint_path(tmp_path, 8)
    intact = max(ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path) if p != damaged)
    flip_bytes(a_model_shard(damaged))
    capfd.readouterr()

    resumed = _train(snapshot_dir, tmp_path, "train.keep_best=2")
    assert resumed.resumed_from_step == intact and resumed.steps == 8
    assert resumed.final_weights_sha256 == reference[0].final_weights_sha256  # trained again, bit for bit
    assert any(str(damaged) in w and "damaged" in w for w in resumed.warnings)
    assert str(damaged) in capfd.readouterr().out  # the worker's log names it
    # Step 8 was saved again: the index and the bytes it points to agree.
    index = json.loads((tmp_path / "index.json").read_text())
    for step in {e["step"] for e in index["checkpoints"] if e["kept"]}:
        assert index["digests"][str(step)] == ckpt.file_digests(ckpt.checkpoint_path(tmp_path, step))


def test_an_mlflow_outage_after_training_keeps_the_finished_training(snapshot_dir, tmp_path, monkeypatch):
    """Before: when MLflow went down once training had finished, rank 0's last calls (the index artifact, the
    final tags) failed after their retries and with them the whole training step. Now the finished training
    is kept, with a warning that says what its MLflow run lacks."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = mlflow.MlflowClient(uri).create_run(ensure_experiment(uri, "ctpipe-test")).info.run_id
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "tracking_lost@8:0")
    config = tiny_config("registry.retry_budget_seconds=2", "registry.retry_backoff_seconds=0.2",
                         "registry.retry_max_backoff_seconds=0.5")
    result = train_model(snapshot_dir, str(tmp_path / "ckpt"), config, tracking_uri=uri, mlflow_run_id=run_id,
                         job_name="t")
    assert result.steps == 8 and result.best_step is not None
    assert any("MLflow stayed unavailable after training finished" in w and "kept" in w for w in result.warnings)
    saved = json.loads((tmp_path / "ckpt" / "train_result.json").read_text())
    assert saved["warnings"] == result.warnings


def test_nan_loss_stops_at_once_with_the_step(snapshot_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "nan@2")  # the third optimizer step
    with pytest.raises(TrainingError, match=r"non-finite loss at step 3") as err:
        _train(snapshot_dir, tmp_path)
    assert "train.lr" in str(err.value)
    assert ckpt.step_of(ckpt.latest_complete(tmp_path)) == 2  # nothing after the NaN was saved


def test_a_raising_rank_fails_the_job_fast(snapshot_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "raise@1:1")
    start = time.monotonic()
    with pytest.raises(TrainingError) as err:
        _train(snapshot_dir, tmp_path, "train.timeout_minutes=10")
    assert time.monotonic() - start < 60  # not the 10-minute collective timeout
    first_line = str(err.value).splitlines()[0]
    assert "rank 1" in first_line and "injected failure on rank 1 at step 1" in first_line


@pytest.mark.parametrize(
    "extra",
    [
        ("train.strategy=ddp", "train.grad_accum_steps=2", "model.kind=transformer", "model.heads=2"),
        ("train.mixed_precision=bf16", "train.activation_checkpointing=true", "train.grad_accum_steps=2"),
    ],
    ids=["ddp-accum-transformer", "fsdp-bf16-checkpointing-accum"],
)
def test_other_strategies_train_and_export(snapshot_dir, tmp_path, extra):
    result = _train(snapshot_dir, tmp_path / "ckpt", "train.max_steps=4", *extra)
    assert result.steps == 4 and result.global_batch_size == 16 * 2 * 2
    assert 0 <= result.final_metrics["val_accuracy"] <= 1 and result.final_metrics["val_loss"] < 5
    selected = select_and_export(
        str(tmp_path / "ckpt"), snapshot_dir, tiny_config(*extra), str(tmp_path / "m.pt")
    )
    exported = load_model_export(tmp_path / "m.pt")
    assert exported.metadata["step"] == selected.step
    assert exported.metadata["export_val_metrics"]["val_accuracy"] == pytest.approx(
        selected.metric_value, abs=0.05
    )


def test_launcher_kills_survivors_and_reports_the_failing_rank_first():
    script = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    sys.exit('rank one broke: disk full')\n"
        "time.sleep(120)\n"
    )
    launch = WorkerLaunch(
        job_name="t", world_size=2, command=[sys.executable, "-c", script], deadline_seconds=60
    )
    start = time.monotonic()
    with pytest.raises(TrainingError, match="rank 1 exited with code 1: rank one broke: disk full"):
        LocalLauncher(echo=False).run(launch)
    assert time.monotonic() - start < 10


def test_launcher_enforces_the_deadline():
    launch = WorkerLaunch(
        job_name="t", world_size=2, command=[sys.executable, "-c", "import time; time.sleep(60)"]
    )
    launch.deadline_seconds = 1
    start = time.monotonic()
    with pytest.raises(TrainingError, match="deadline"):
        LocalLauncher(echo=False).run(launch)
    assert time.monotonic() - start < 10


def test_a_selection_metric_validation_never_reports_stops_the_job_before_its_first_step(snapshot_dir, tmp_path):
    """With the sanity step off (it checks this too), the trainer itself refuses it before training: before,
    every step ran, then 'training finished without an evaluated checkpoint'. A config error: not restarted."""
    with pytest.raises(TrainingError, match=r"select\.metric.*val_bogus.*reports: val_loss, val_accuracy") as err:
        _train(snapshot_dir, tmp_path, "select.metric=val_bogus", "select.mode=max")
    assert "exited with code 2" in str(err.value)
    assert ckpt.checkpoint_dirs(tmp_path) == []  # not one step was checkpointed


@pytest.mark.parametrize(
    "change, named",
    [
        (("train.lr=0.01", "model.dropout=0.3"), ["train.lr: checkpoint 0.003, now 0.01", "model.dropout"]),
        (("model.hidden=32",), ["model.hidden: checkpoint 16, now 32"]),
    ],
    ids=["hyperparameters", "model-size"],
)
def test_a_checkpoint_of_another_training_is_refused_not_resumed(reference, tmp_path, snapshot_dir, change, named):
    """Before: a finished run re-run with another lr/dropout 'resumed' at its last step and returned the old
    weights as the new config's result; a changed model size died in DCP with a size mismatch (exit 1, so a
    launcher restarted it). Now a permanent error naming what differs, and nothing is written."""
    import shutil

    shutil.copytree(reference[1], tmp_path / "ckpt")
    def checkpoint_files():
        return {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / "ckpt").rglob("step_*/*")} | {
            "index": (tmp_path / "ckpt" / "index.json").read_bytes()}

    before = checkpoint_files()
    with pytest.raises(TrainingError, match="exited with code 2") as err:
        _train(snapshot_dir, tmp_path / "ckpt", *change)
    for text in named:
        assert text in str(err.value)
    assert checkpoint_files() == before


def test_a_crash_after_the_last_save_is_marked_still_ends_with_the_true_index(reference, snapshot_dir, tmp_path,
                                                                                monkeypatch):
    """Rank 0 dies after step 8 (the last) is marked complete, before retention and index.json. Before: the
    restart resumed at step 8, had nothing to train, and never rewrote index.json, so selection read the
    index of step 6 (no step 8, stale `kept` flags) while train_result.json named another best step."""
    monkeypatch.setenv("CTPIPE_TEST_FAULT", "marked_crash@8:0")
    with pytest.raises(TrainingError, match="rank 0 exited with code 19"):
        _train(snapshot_dir, tmp_path)
    assert ckpt.is_complete(ckpt.checkpoint_path(tmp_path, 8))
    monkeypatch.delenv("CTPIPE_TEST_FAULT")
    # A restart with a metric validation never reports is refused before that bookkeeping deletes anything.
    on_disk = ckpt.checkpoint_dirs(tmp_path)
    with pytest.raises(TrainingError, match="val_bogus"):
        _train(snapshot_dir, tmp_path, "select.metric=val_bogus", "select.mode=max")
    assert ckpt.checkpoint_dirs(tmp_path) == on_disk
    resumed = _train(snapshot_dir, tmp_path)
    assert resumed.resumed_from_step == 8
    index, expected = (json.loads((d / "index.json").read_text()) for d in (tmp_path, reference[1]))
    assert index["checkpoints"] == expected["checkpoints"] and index["best_step"] == expected["best_step"]
    assert resumed.best_step == index["best_step"]
    assert {ckpt.step_of(p) for p in ckpt.checkpoint_dirs(tmp_path)} == {index["best_step"], 8}


def test_a_checkpoint_trained_on_other_data_is_refused(reference, tmp_path):
    """The worker itself compares the data fingerprint (the pipeline and cluster restarts hand it a snapshot
    directory; only `ctpipe train` checked it before)."""
    import shutil

    write_demo_data(tmp_path / "data", days=2, rows_per_day=210, seed=5)
    other = build_snapshot(str(tmp_path / "data"), tiny_config(), tmp_path / "snapshot")
    shutil.copytree(reference[1], tmp_path / "ckpt")
    with pytest.raises(TrainingError, match=r"exited with code 2.*data\.fingerprint: checkpoint \w+, now \w+"):
        _train(str(other.root), tmp_path / "ckpt")


USER_TASK = '''
from ctpipe.components.tasks.tabular import TabularClassification


class Scaled(TabularClassification):
    """A user's task whose encoding scales the numeric inputs."""

    def encode(self, frame, state):
        batch = super().encode(frame, state)
        return type(batch)((batch.inputs[0] * SCALE, *batch.inputs[1:]), batch.targets)


SCALE = {scale}


def make_task(**options):
    return Scaled()
'''


def test_a_checkpoint_of_other_task_code_is_refused_not_resumed(snapshot_dir, tmp_path, monkeypatch):
    """Before: the resume identity held the task record (name, entrypoint, options) but not its code, so a
    re-run after the user's task module changed (here its encoding) resumed the old weights under the new
    code. Now the checkpoint records the code's identity (entrypoint, source digest) and a change is refused,
    naming it; a checkpoint without that record resumes as before."""
    import os

    from ctpipe.components.tasks.registry import _CACHE

    module = tmp_path / "user_scaled_task.py"
    module.write_text(USER_TASK.format(scale=1.0))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    _CACHE.clear()
    change = ("task.entrypoint=user_scaled_task:make_task", "train.max_steps=4")
    ckpt_dir = tmp_path / "ckpt"
    _train(snapshot_dir, ckpt_dir, *change)
    latest = ckpt.latest_complete(ckpt_dir)
    assert ckpt.read_meta(latest)["identity"]["task_code"]["entrypoint"] == "user_scaled_task:make_task"

    module.write_text(USER_TASK.format(scale=2.0))
    with pytest.raises(TrainingError, match="exited with code 2") as err:
        _train(snapshot_dir, ckpt_dir, *change)
    assert "task_code.source_sha256: checkpoint " in str(err.value)

    meta = ckpt.read_meta(latest)  # a checkpoint saved before the task code (and digests) were recorded
    del meta["identity"]["task_code"]
    ckpt.write_json_atomic(latest / ckpt.META_FILE, meta)
    (latest / ckpt.DIGESTS_FILE).unlink()  # its edited meta would otherwise read as damage
    assert _train(snapshot_dir, ckpt_dir, *change).summary()["resumed_from_step"] == 4
    sys.modules.pop("user_scaled_task", None)
    _CACHE.clear()


def test_a_small_table_trains_max_epochs_passes_and_selects_among_as_many_checkpoints(snapshot_dir, tmp_path):
    # 40 steps of 32 rows would be 4 passes over the ~320 train rows: max_epochs=1 stops after one, and the
    # evaluation and checkpoint intervals shrink with it (10 -> 2-3 steps), so selection still has 4 to choose from.
    result = _train(snapshot_dir, tmp_path / "ckpt", "train.max_steps=40", "train.eval_every=10",
                    "train.checkpoint_every=10", "train.max_epochs=1")
    rows = load_snapshot(snapshot_dir).rows("train")
    assert result.steps == math.ceil(rows / 32) < 40
    latest = ckpt.latest_complete(tmp_path / "ckpt")
    assert latest is not None and ckpt.read_meta(latest)["step"] == result.steps
    # The run's identity is the settings asked for (with the rows they were applied to): a resume compares those.
    assert ckpt.read_meta(latest)["identity"]["train"]["max_steps"] == 40
