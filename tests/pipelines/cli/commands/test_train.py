"""`ctpipe train`: snapshot + train + train_summary.json, resume on a second run, clean user errors."""

from __future__ import annotations

import json

import mlflow

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import load_config
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.local.train_alone import mlflow_run_for_output
from tests.fixtures.exact import EXACT_TRAINING

# A second run on the same --out must end with the same weights, bit for bit: EXACT_TRAINING pins what makes
# that exact.
TINY = [
    *EXACT_TRAINING,
    "data.key=customer_id",
    "model.hidden=16",
    "model.depth=1",
    "model.embedding_dim=4",
    "train.max_steps=6",
    "train.warmup_steps=1",
    "train.eval_every=3",
    "train.checkpoint_every=3",
    "train.batch_size=16",
]


def _args(data, out, *extra):
    sets = [x for item in TINY + list(extra) for x in ("--set", item)]
    return ["train", "--data", str(data), "--out", str(out), *sets]


def test_train_writes_summary_and_resumes(tmp_path, capsys):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=150, seed=3)
    out = tmp_path / "out"
    assert main(_args(tmp_path / "data", out)) == 0
    summary = json.loads((out / "train_summary.json").read_text())
    assert summary["steps"] == 6 and summary["world_size"] == 2
    assert summary["best_checkpoint"]["step"] in (3, 6) and 0 <= summary["best_checkpoint"]["value"] <= 1
    assert summary["samples_per_second"] > 0 and 0 < summary["mfu"] < 1
    assert len(summary["final_weights_sha256"]) == 64
    assert (out / "snapshot" / "train.parquet").is_file() and (out / "checkpoints" / "index.json").is_file()
    # What a reproduction compares (`ctpipe models reproduce`): the ranks' platform, in the checkpoint index.
    platform = json.loads((out / "checkpoints" / "index.json").read_text())["platform"]
    assert platform["world_size"] == 2 and platform["device"] == "cpu" and platform["dtype"] == "float32"
    assert platform["threads_per_worker"] == 1 and platform["torch"] and platform["cpu_capability"]
    assert capsys.readouterr().out.strip().endswith("train_summary.json")

    # Run again: nothing left to train, it resumes at the last checkpoint and ends with the same weights.
    assert main(_args(tmp_path / "data", out)) == 0
    again = json.loads((out / "train_summary.json").read_text())
    assert again["resumed_from_step"] == 6
    assert again["final_weights_sha256"] == summary["final_weights_sha256"]


def test_a_damaged_checkpoint_is_named_and_skipped_by_the_next_train_with_the_same_out(tmp_path, capfd):
    """The issue's case: 256 flipped bytes inside a shard of a complete checkpoint, then `ctpipe train` with the
    same --out. Before: exit 0, no warning, resumed from it, other final weights."""
    from ctpipe.components.engine import checkpointing as ckpt
    from tests.fixtures.damage import a_model_shard, flip_bytes

    write_demo_data(tmp_path / "data", days=2, rows_per_day=150, seed=3)
    out = tmp_path / "out"
    assert main(_args(tmp_path / "data", out)) == 0
    first = json.loads((out / "train_summary.json").read_text())
    damaged = ckpt.checkpoint_path(out / "checkpoints", 6)
    flip_bytes(a_model_shard(damaged))
    capfd.readouterr()

    assert main(_args(tmp_path / "data", out)) == 0
    again = json.loads((out / "train_summary.json").read_text())
    assert again["resumed_from_step"] == 3  # the previous intact checkpoint
    assert again["final_weights_sha256"] == first["final_weights_sha256"]
    assert any(str(damaged) in w for w in again["warnings"])
    assert str(damaged) in capfd.readouterr().out


def test_user_errors_are_one_paragraph_without_traceback(tmp_path, capsys):
    assert main(_args(tmp_path / "missing", tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    # `ctpipe train` needs --data: the message must not tell it to leave --data out (it said so before).
    assert "omit --data" not in err and "ctpipe demo-data --out" in err
    write_demo_data(tmp_path / "data", days=1, rows_per_day=50, seed=3)
    assert main(_args(tmp_path / "data", tmp_path / "out", "train.strategy=zero")) == 2
    assert "train.strategy" in capsys.readouterr().err


def test_unknown_label_names_the_fix(tmp_path, capsys):
    write_demo_data(tmp_path / "data", days=1, rows_per_day=50, seed=3)
    assert main(_args(tmp_path / "data", tmp_path / "out", "data.label=nope")) == 2
    assert "data.label" in capsys.readouterr().err


def test_one_mlflow_run_per_output_directory(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    config = load_config(None, TINY)
    (tmp_path / "out").mkdir()
    first = mlflow_run_for_output(uri, config, tmp_path / "out", "/data")
    assert (
        mlflow_run_for_output(uri, config, tmp_path / "out", "/data") == first
    )  # a resumed run logs into the same run
    assert mlflow.MlflowClient(uri).get_run(first).data.tags["ctpipe.trigger"] == "train-cli"


def test_a_rerun_with_other_split_settings_is_refused_not_resumed_on_the_old_split(tmp_path, capsys):
    """Before: a re-run with a new data.split_salt (or key, or fractions) reused the old snapshot and resumed,
    so the new split settings were silently ignored. Now it is refused before training, naming each setting
    and the fix (a new --out); the checkpoints and snapshot are left as they were."""
    write_demo_data(tmp_path / "data", days=2, rows_per_day=150, seed=3)
    out = tmp_path / "out"
    assert main(_args(tmp_path / "data", out)) == 0
    capsys.readouterr()

    def files():
        return {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != "train_summary.json"}

    before = files()
    assert main(_args(tmp_path / "data", out, "data.split_salt=another", "data.val_fraction=0.3")) == 2
    err = capsys.readouterr().err
    assert "data.split_salt: checkpoint ctpipe-v1, now another" in err and "data.val_fraction: checkpoint" in err
    assert "new --out" in err and "Traceback" not in err
    assert files() == before


def test_a_rerun_with_other_training_settings_is_refused_before_any_rank_starts(tmp_path, capsys):
    """Before: the ranks refused the changed settings, so `ctpipe train` printed each rank's traceback and
    exited 1 ("training failed"), as for a crash. Now the command refuses it before launching: exit 2, one
    message naming each setting and the fix, no traceback; the checkpoints are left as they were."""
    write_demo_data(tmp_path / "data", days=2, rows_per_day=150, seed=3)
    out = tmp_path / "out"
    assert main(_args(tmp_path / "data", out)) == 0
    capsys.readouterr()
    before = {p: p.read_bytes() for p in (out / "checkpoints").rglob("*") if p.is_file()}
    assert main(_args(tmp_path / "data", out, "train.max_steps=12", "train.lr=0.01", "model.hidden=32")) == 2
    captured = capsys.readouterr()
    err = captured.err + captured.out
    assert "train.max_steps: checkpoint 6, now 12" in err and "train.lr: checkpoint 0.003, now 0.01" in err
    assert "model.hidden: checkpoint 16, now 32" in err and "new --out" in err
    assert "Traceback" not in err and "[rank" not in err
    assert {p: p.read_bytes() for p in (out / "checkpoints").rglob("*") if p.is_file()} == before
