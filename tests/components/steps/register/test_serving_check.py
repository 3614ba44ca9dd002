"""The infra-validation gate: a candidate whose logged model does not serve, in a fresh process, what evaluation
scored is registered as not servable and the champion stays."""

from __future__ import annotations

import subprocess

import mlflow
import pandas as pd
import pytest

from ctpipe.components.lib.config import Threshold
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.registry import model_files
from ctpipe.components.lib.registry.model_files import own_package
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.warm_start import standby
from ctpipe.components.steps.register.model_artifacts import build_pyfunc_model
from ctpipe.components.steps.register.serving_check import check_serving, compare_served, serving_standby
from ctpipe.components.tasks.export import load_model_export
from tests.components.steps.register.test_register import _cycle, models  # noqa: F401
from tests.fixtures.registry import fast_config

# Appended to the shipped copy of the tabular task: the served probabilities are no longer the evaluated ones.
SKEWED_SERVE = """
_evaluated_serve = TabularClassification.serve
TabularClassification.serve = lambda self, model, frame, state: _evaluated_serve(self, model, frame, state) ** 2
"""


def _shipping(monkeypatch, broken) -> None:
    """Break the code the model ships (``broken(code_dir)``) after it is staged, before its manifest is written."""
    staged = model_files.stage_code

    def stage_and_break(sources, out_dir):
        paths = staged(sources, out_dir)
        broken(out_dir / own_package())
        return paths

    monkeypatch.setattr(model_files, "stage_code", stage_and_break)


def _skew(code_dir) -> None:
    tabular = code_dir / "components" / "tasks" / "tabular.py"
    tabular.write_text(tabular.read_text() + SKEWED_SERVE)


def test_a_blessed_candidate_served_otherwise_than_evaluated_keeps_the_champion(models, tmp_path, monkeypatch):  # noqa: F811
    # Before: nothing checked the logged model before the alias moved; a champion whose server returns other
    # predictions than the evaluated ones was promoted.
    config = fast_config()
    config.evaluate.thresholds = {"accuracy": Threshold(value="baseline")}  # any candidate over the floor is blessed
    first = _cycle(models, tmp_path, "a", "p1", config)[2]()
    assert first.promoted and first.servable
    _shipping(monkeypatch, _skew)
    run_id, _, register = _cycle(models, tmp_path, "b", "p2", config)
    result = register()
    assert not result.servable and not result.promoted
    assert result.aliases == ["challenger"] and result.champion == "1"
    assert "not servable" in result.promotion_reason and "differs on" in result.promotion_reason
    registry = Registry(local_tracking_uri(tmp_path), config.registry)
    assert registry.alias_version("champion") == "1"
    tags = registry.get_version("2").tags
    assert tags["ctpipe.blessed"] == "true" and tags["ctpipe.servable"] == "false"
    assert "served predictions differ from the evaluated ones" in registry.lineage(registry.get_version("2"))[
        "serving_check"]
    card = mlflow.MlflowClient(local_tracking_uri(tmp_path)).download_artifacts(run_id, "reports/model_card.md",
                                                                              str(tmp_path / "card"))
    text = open(card).read()
    assert "## Serving check" in text and "FAILED: not servable" in text


@pytest.mark.parametrize("where", ["fresh", "standby"])
def test_a_model_missing_a_module_it_imports_does_not_serve_though_ctpipe_is_installed(
        models, tmp_path, monkeypatch, where):  # noqa: F811
    # The clean process has nothing of ctpipe but what the model ships: the installed (editable) ctpipe, which
    # has the file, cannot stand in for it; in a standby (libraries imported ahead) as in a fresh interpreter.
    _shipping(monkeypatch, lambda code_dir: (code_dir / "components" / "tasks" / "tabular.py").unlink())
    snapshot = load_snapshot(models["snap"])
    model_dir = build_pyfunc_model(models["a"], snapshot, tmp_path / "pyfunc")
    rows = snapshot.frame("test")[snapshot.schema.all_features].head(4)
    monkeypatch.delenv(standby.STANDBY_ENV, raising=False)
    if where == "standby":
        with serving_standby() as warm:
            check = check_serving(model_dir, rows, pd.DataFrame(), [own_package()], warm=warm)
    else:
        check = check_serving(model_dir, rows, pd.DataFrame(), [own_package()])
    assert not check.servable
    assert f"No module named '{own_package()}.components.tasks.tabular'" in check.reason


def _no_fresh_interpreter(*args, **kwargs):
    raise AssertionError("a fresh interpreter was started for the serving check")


def test_the_check_runs_in_a_standby_that_imported_its_libraries_ahead(models, tmp_path, monkeypatch):  # noqa: F811
    """Before: every check started a fresh `python -I` that imported MLflow, pandas and torch inside the check (the
    register step's 8 s of a first run). Now a standby has them imported while the step builds the pyfunc, and
    serves the check with the same guarantee (nothing of ctpipe but the model's code)."""
    snapshot = load_snapshot(models["snap"])
    model_dir = build_pyfunc_model(models["a"], snapshot, tmp_path / "pyfunc")
    rows = snapshot.frame("test")[snapshot.schema.all_features].head(4)
    expected = load_model_export(models["a"]).serve(rows)
    monkeypatch.delenv(standby.STANDBY_ENV, raising=False)
    with serving_standby() as warm:
        monkeypatch.setattr(subprocess, "run", _no_fresh_interpreter)
        check = check_serving(model_dir, rows, expected, [own_package()], warm=warm)
    assert check.servable, check.reason
    assert "a warm standby interpreter" in check.reason


def test_a_standby_that_imported_ctpipe_is_not_clean_and_the_check_runs_fresh(models, tmp_path):  # noqa: F811
    snapshot = load_snapshot(models["snap"])
    model_dir = build_pyfunc_model(models["a"], snapshot, tmp_path / "pyfunc")
    rows = snapshot.frame("test")[snapshot.schema.all_features].head(4)
    expected = load_model_export(models["a"]).serve(rows)
    socket_path = tmp_path / "standby.sock"
    unclean = standby.start(str(socket_path), (f"{own_package()}.components.lib.config",))
    try:
        check = check_serving(model_dir, rows, expected, [own_package()], warm=standby.Standby(str(socket_path), unclean))
    finally:
        unclean.kill()
        unclean.wait()
    assert check.servable, check.reason
    assert "a fresh interpreter" in check.reason


def test_compare_served_names_the_column_and_the_rows_that_differ():
    evaluated = pd.DataFrame({"predicted_class": ["a", "b"], "a": [0.9, 0.2], "b": [0.1, 0.8]})
    assert compare_served(evaluated.copy(), evaluated) is None
    assert compare_served(evaluated.assign(b=[0.1, 0.8 + 1e-9]), evaluated) is None  # within rounding
    assert compare_served(evaluated.assign(a=[0.9, 0.3]), evaluated) == (
        "column 'a' differs on 1 of 2 rows (largest difference 0.1)")
    assert "row 1: served 'a', evaluated 'b'" in compare_served(evaluated.assign(predicted_class=["a", "a"]), evaluated)
    assert compare_served(evaluated[["a", "b"]], evaluated).startswith("columns ['a', 'b'], evaluated")

