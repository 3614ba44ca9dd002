"""`ctpipe tune`: the search alone, its report, its summary and a config file with the chosen values; a space
placed so that the best learning rate sits at its edge says so (the boundary check)."""

from __future__ import annotations

import json
import re

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import resolve_config
from ctpipe.pipelines.cli.main import main

TINY = ["data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.workers=1",
        "train.max_steps=60", "train.eval_every=10", "train.batch_size=16", "train.timeout_minutes=2"]


def _args(data, out, *settings):
    return ["tune", "--data", str(data), "--out", str(out), *[x for s in (*TINY, *settings) for x in ("--set", s)]]


def test_without_trials_it_refuses(tmp_path, capsys):
    write_demo_data(tmp_path / "data", days=1, rows_per_day=100, seed=3)
    assert main(_args(tmp_path / "data", tmp_path / "out")) == 2
    assert "needs tune.trials > 0" in capsys.readouterr().err


@pytest.mark.slow
def test_a_best_learning_rate_at_the_edge_of_its_range_is_reported(tmp_path, capsys):
    """Three trials on a grid of learning rates far below the configured one: after 30 steps the largest learns
    most, so the best value is the range's upper end."""
    write_demo_data(tmp_path / "data", days=2, rows_per_day=300, seed=3)
    out = tmp_path / "out"
    code = main(_args(tmp_path / "data", out, "tune.trials=3", "tune.trial_steps=30", "tune.sampler=grid",
                      "tune.baseline_trial=false", "tune.parallel_trials=2",
                      'tune.space={train.lr: "log_uniform(1e-5, 3e-3)"}'))
    printed = capsys.readouterr().out
    assert code == 0, printed
    summary = json.loads((out / "tune_summary.json").read_text())
    assert [t["values"]["train.lr"] for t in summary["trials"]] == [1e-5, 0.000173205, 3e-3]
    assert summary["chosen"]["values"] == {"train.lr": 3e-3}
    (warning,) = summary["boundary_warnings"]
    assert warning.startswith("train.lr: the best value 0.003 lies in the upper 10% (log scale)") and "widen" in warning
    page = (out / "tune_report.html").read_text()
    assert "Boundary check" in page and len(re.findall(r"<tr(?: class='chosen')?><td>\d+</td>", page)) == 3
    assert page.count("src='data:image/png;base64,") == 1
    # The chosen values as a config file ctpipe run takes.
    assert resolve_config(file=out / "tuned_config.json").train.lr == 3e-3
    assert printed.strip().endswith("tune_summary.json")
