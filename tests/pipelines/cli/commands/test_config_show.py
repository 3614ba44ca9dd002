"""`ctpipe config show`: the resolved config with the layer that set each value, as the run would resolve it."""

from __future__ import annotations

import json

from ctpipe.pipelines.cli.main import main


def _shown(capsys, *argv: str) -> dict:
    assert main(["config", "show", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_each_value_names_its_layer(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text("train: {max_steps: 40, lr: 0.01}\n")
    shown = _shown(capsys, "--task", "causal_lm", "--config", str(path), "--set", "train.max_steps=41")
    config, origins = shown["config"], shown["origins"]
    assert (config["train"]["max_steps"], origins["train.max_steps"]) == (41, "--set")
    assert (config["train"]["lr"], origins["train.lr"]) == (0.01, f"file {path}")
    assert (config["select"]["metric"], origins["select.metric"]) == ("val_loss", "task causal_lm")
    assert (config["data"]["key"], origins["data.key"]) == ("doc_id", "demo")  # the LM's demo text
    assert origins["train.batch_size"] == "demo"  # the LM demo's own batch size
    assert origins["evaluate.thresholds.loss.value"] == "task causal_lm"


def test_cluster_shows_what_compile_compiles_in(capsys):
    shown = _shown(capsys, "--cluster")
    assert (shown["config"]["train"]["backend"], shown["origins"]["train.backend"]) == ("auto", "cluster")
    assert shown["config"]["data"]["key"] is None  # no demo layer on a cluster


def test_the_text_form_is_one_line_per_value(capsys):
    assert main(["config", "show", "--set", "train.workers=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("train.workers: 3 ") and line.rstrip().endswith("# --set") for line in lines)
    assert any(line.startswith("data.key: customer_id ") and line.rstrip().endswith("# demo") for line in lines)


def test_a_bad_value_is_the_usual_named_user_error(capsys):
    assert main(["config", "show", "--set", "train.lr=20"]) == 2
    assert "train.lr" in capsys.readouterr().err
