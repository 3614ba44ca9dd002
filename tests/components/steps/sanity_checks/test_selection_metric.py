"""The sanity step stops a run whose ``select.metric`` the task's validation never produces.

Before: training ran to its end, then failed with "training finished without an evaluated checkpoint"
(the trainer indexes checkpoints by ``select.metric``): minutes or hours lost to a typo.
"""

from __future__ import annotations

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.corpus import KEY, write_clean


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    root = tmp_path_factory.mktemp("sel")
    config = Config.from_dict({"data": {"key": KEY}})
    validate_data(str(write_clean(root / "data")), config, snapshot_dir=str(root / "snapshot"), data_docs_path="",
                  report_path="", tracking_uri="", mlflow_run_id="")
    return root / "snapshot"


def _config(metric: str, mode: str = "max") -> Config:
    return Config.from_dict({"data": {"key": KEY}, "model": {"hidden": 32, "depth": 1, "dropout": 0.0},
                             "sanity": {"sample_rows": 512, "overfit_steps": 150, "short_train_steps": 40},
                             "select": {"metric": metric, "mode": mode}})


def test_a_selection_metric_the_validation_never_produces_is_a_config_error(snapshot, tmp_path):
    with pytest.raises(ConfigError, match=r"select\.metric.*val_acuracy.*reports: val_loss, val_accuracy"):
        run_sanity_checks(str(snapshot), _config("val_acuracy"), report_path=str(tmp_path / "r.md"),
                          first_batch_path=str(tmp_path / "fb.json"), tracking_uri="", mlflow_run_id="")


def test_a_selection_metric_the_validation_produces_passes(snapshot, tmp_path):
    result = run_sanity_checks(str(snapshot), _config("val_loss", "min"), report_path=str(tmp_path / "r.md"),
                               first_batch_path=str(tmp_path / "fb.json"), tracking_uri="", mlflow_run_id="")
    assert result.passed
