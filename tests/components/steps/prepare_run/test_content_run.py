"""With caching, the first step fingerprints the data and opens the MLflow run of that content, shared by reruns."""

from __future__ import annotations

import mlflow
import pandas as pd

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.tracking import TRAINING_RUN_TAG
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.prepare_run.prepare import prepare_run


def _prepare(tmp_path, run_id: str, *overrides: str):
    return prepare_run(load_config(None, list(overrides)).to_json(), "", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                       pipeline_run_id=run_id, trigger="manual", data_uri=str(tmp_path / "data"))


def test_reruns_on_unchanged_data_share_one_training_run_and_changed_data_gets_another(tmp_path):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=50, seed=1)
    first, second = _prepare(tmp_path, "p1"), _prepare(tmp_path, "p2")
    assert len(first.data_fingerprint) == 64 and first.data_fingerprint == second.data_fingerprint
    assert first.training_run_id == second.training_run_id
    assert first.training_run_id not in (first.mlflow_run_id, second.mlflow_run_id)
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    assert client.get_run(second.mlflow_run_id).data.tags[TRAINING_RUN_TAG] == first.training_run_id

    other_config = _prepare(tmp_path, "p3", "train.max_steps=123")
    assert other_config.training_run_id != first.training_run_id
    part = sorted((tmp_path / "data").glob("date=*/part-0.parquet"))[-1]
    pd.read_parquet(part).iloc[1:].to_parquet(part, index=False)
    changed = _prepare(tmp_path, "p4")
    assert changed.data_fingerprint != first.data_fingerprint
    assert changed.training_run_id != first.training_run_id


def test_without_caching_the_steps_log_to_the_pipeline_runs_own_mlflow_run(tmp_path):
    prepared = _prepare(tmp_path, "p1", "pipeline.caching=false")  # no data root needed then
    assert prepared.training_run_id == prepared.mlflow_run_id and prepared.data_fingerprint == ""
