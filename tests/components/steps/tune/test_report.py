"""The search's page: the boundary check on each range's own scale, the scientific/nuisance/fixed split, the best
objective per value of a scientific hyperparameter, and every trial whatever its outcome."""

from __future__ import annotations

import re

from ctpipe.components.lib.config import SearchDimension
from ctpipe.components.run_config import resolve_config
from ctpipe.components.steps.tune.report import best_per_value, boundary_warnings, render_report
from ctpipe.components.steps.tune.trials import TrialOutcome

LR = SearchDimension(kind="log_uniform", low=1e-4, high=1e-1)
DEPTH = SearchDimension(kind="int", low=1, high=11)
KIND = SearchDimension(kind="choice", values=["mlp", "transformer"])


def best(**values):
    return TrialOutcome(index=3, values=values, status="succeeded", job_name="j", objective=0.9)


def test_the_boundary_check_reads_each_range_on_its_own_scale():
    dims = {"train.lr": LR, "model.depth": DEPTH, "model.kind": KIND}
    # 1.5e-4 is in the lowest 10 % of the log range (1e-4..1e-1: below 2e-4); 1 is the lowest of 1..11.
    warnings = boundary_warnings(dims, best(**{"train.lr": 1.5e-4, "model.depth": 1, "model.kind": "mlp"}))
    assert [w.split(":")[0] for w in warnings] == ["train.lr", "model.depth"]
    assert "lower 10% (log scale)" in warnings[0] and "widen the range downward" in warnings[0]
    # 5e-3 is mid-range on the log scale though near the low end on a linear one; a choice has no boundary.
    assert boundary_warnings(dims, best(**{"train.lr": 5e-3, "model.depth": 6, "model.kind": "transformer"})) == []
    assert "lies outside its range" in boundary_warnings({"train.lr": LR}, best(**{"train.lr": 0.3}))[0]
    assert boundary_warnings(dims, None) == []


def test_the_page_lists_every_trial_and_the_split(tmp_path):
    config = resolve_config(settings=["tune.trials=4", "tune.scientific=[model.kind]", "tune.fixed=[train.batch_size]",
                                      'tune.space={train.lr: "log_uniform(1e-4, 1e-1)", model.kind: "choice(mlp, transformer)"}'])
    outcomes = [
        TrialOutcome(0, {"train.lr": 3e-3, "model.kind": "mlp"}, "succeeded", "j0", baseline=True, objective=0.8),
        TrialOutcome(1, {"train.lr": 1e-2, "model.kind": "transformer"}, "succeeded", "j1", objective=0.85),
        TrialOutcome(2, {"train.lr": 9e-2, "model.kind": "transformer"}, "diverged", "j2", error="non-finite loss at step 3"),
        TrialOutcome(3, {"train.lr": 2e-4, "model.kind": "mlp"}, "not_started", "j3", error="the search stopped"),
    ]
    assert best_per_value("model.kind", outcomes, "max") == [("mlp", 0.8, 0), ("transformer", 0.85, 1)]
    path = tmp_path / "report.html"
    render_report(path, config, outcomes, outcomes[1], [], metric="val_accuracy", direction="max", seconds=12.0)
    page = path.read_text()
    assert re.findall(r"<tr(?: class='chosen')?><td>(\d+)</td>", page) == ["0", "1", "2", "3"]
    assert "<tr class='chosen'><td>1</td>" in page
    for text in ("scientific", "nuisance", "train.batch_size</td><td class='text'>fixed</td><td class='text'>64",
                 "non-finite loss at step 3", "not_started", "model.kind (scientific)", "4 trials: 2 succeeded"):
        assert text in page, text
    assert page.count("src='data:image/png;base64,") == 2
