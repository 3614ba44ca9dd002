"""With caching, the first step fingerprints the data and opens the MLflow run of that content, shared by reruns."""

from __future__ import annotations

import json
import sys
import textwrap

import mlflow
import pandas as pd
import pytest

from ctpipe.components.lib.data.demo import generate_day, write_demo_data
from ctpipe.components.lib.data.files import fingerprint_files, list_data_files
from ctpipe.components.lib.tracking import TRAINING_RUN_TAG
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.prepare_run.prepare import prepare_run
from ctpipe.components.tasks.registry import _CACHE
from ctpipe.testing.data_edits import shuffle_first_half, write_plain_parquet


def _prepare(tmp_path, run_id: str, *overrides: str, expected: str = ""):
    extra = {"expected_fingerprint": expected} if expected else {}
    return prepare_run(load_config(None, list(overrides)).to_json(), "", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db",
                       pipeline_run_id=run_id, trigger="manual", data_uri=str(tmp_path / "data"), **extra)


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


def test_a_same_size_edit_keeping_each_files_tail_and_mtime_is_a_cache_miss(tmp_path):
    # Issue 46: the labels of the first half of every partition shuffled, each file's size, last 64 KiB and mtime
    # kept. The old key (listing, sizes, tails) was unchanged, so KFP served validate..select from the cache.
    for day in range(2):
        write_plain_parquet(generate_day(day, 4000, 1, False, key_offset=day * 4000),
                            tmp_path / "data" / f"date=2026-01-0{day + 1}" / "part-0.parquet")
    first = _prepare(tmp_path, "p1")
    for part in sorted((tmp_path / "data").glob("date=*/part-0.parquet")):
        shuffle_first_half(part, "label")
    changed = _prepare(tmp_path, "p2")
    assert changed.data_fingerprint != first.data_fingerprint
    assert changed.training_run_id != first.training_run_id  # another content run: the cached steps' inputs differ
    # The fingerprint is validation's (and the registered version's), not a cheaper stand-in.
    assert changed.data_fingerprint == fingerprint_files(list_data_files(str(tmp_path / "data")))


USER_TASK = textwrap.dedent('''
    from ctpipe.components.tasks.tabular import TabularClassification


    class MyTask(TabularClassification):
        name = "my_task"


    def make_task(**options):
        return MyTask()
''')


def test_a_changed_user_task_package_is_a_cache_miss(tmp_path, monkeypatch):
    # Before: the key held ctpipe's own git commit (empty for a wheel) and task.entrypoint as a string, so a
    # user's edited model was served the cached training of the old one.
    package = tmp_path / "code" / "churn46"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "task.py").write_text(USER_TASK)
    (package / "layers.py").write_text("WIDTH = 16\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    write_demo_data(tmp_path / "data", days=2, rows_per_day=50, seed=1)
    try:
        first = _prepare(tmp_path, "p1", "task.entrypoint=churn46.task:make_task")
        again = _prepare(tmp_path, "p2", "task.entrypoint=churn46.task:make_task")
        (package / "layers.py").write_text("WIDTH = 32\n")  # a helper module of the task, not the factory
        changed = _prepare(tmp_path, "p3", "task.entrypoint=churn46.task:make_task")
    finally:
        for name in [m for m in sys.modules if m == "churn46" or m.startswith("churn46.")]:
            sys.modules.pop(name)
        _CACHE.clear()
    assert again.training_run_id == first.training_run_id
    assert changed.training_run_id != first.training_run_id


def test_a_run_started_for_a_data_version_that_has_moved_on_stops_before_anything_is_reused(tmp_path):
    from ctpipe.components.lib.errors import DataChangedError

    write_demo_data(tmp_path / "data", days=2, rows_per_day=50, seed=1)
    seen = _prepare(tmp_path, "p1").data_fingerprint
    assert _prepare(tmp_path, "p2", expected=seen).data_fingerprint == seen
    part = sorted((tmp_path / "data").glob("date=*/part-0.parquet"))[-1]
    pd.read_parquet(part).iloc[1:].to_parquet(part, index=False)
    with pytest.raises(DataChangedError, match=f"expected fingerprint {seen[:12]}"):
        _prepare(tmp_path, "p3", expected=seen)
    # Without caching a watcher's run is checked all the same.
    with pytest.raises(DataChangedError):
        _prepare(tmp_path, "p4", "pipeline.caching=false", expected=seen)


def test_each_pipeline_run_is_one_top_level_mlflow_run_with_the_resolved_config_as_params(tmp_path):
    """Issue 47: two pipeline runs made three top-level MLflow runs, the pipeline run had no params. Now the content
    run is a nested child of the pipeline run that first needed it, and each pipeline run carries its config."""
    write_demo_data(tmp_path / "data", days=2, rows_per_day=50, seed=1)
    first, second = _prepare(tmp_path, "p1", "train.max_steps=77"), _prepare(tmp_path, "p2", "train.max_steps=77")
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_run(first.mlflow_run_id).info.experiment_id])
    top = {run.info.run_id for run in runs if "mlflow.parentRunId" not in run.data.tags}
    assert top == {first.mlflow_run_id, second.mlflow_run_id}
    assert client.get_run(first.training_run_id).data.tags["mlflow.parentRunId"] == first.mlflow_run_id
    for prepared in (first, second):
        params = client.get_run(prepared.mlflow_run_id).data.params
        assert params["train.max_steps"] == "77" and params["task.name"] == load_config(None, []).task.name
        assert params["data.key"] == str(load_config(None, []).data.key)


def test_a_reproduction_run_trains_afresh_in_its_own_mlflow_run_even_with_caching(tmp_path):
    # Trigger reproduce (`ctpipe models reproduce VERSION --host`): the cached steps' inputs name the content's
    # training run, so KFP would hand the reproduction the very model it is to rebuild. It gets its own run.
    write_demo_data(tmp_path / "data", days=2, rows_per_day=50, seed=1)
    first = _prepare(tmp_path, "p1")
    config = load_config(None, ["train.max_steps=77"]).to_json()  # the version's recorded config
    again = prepare_run(config, "", tracking_uri=f"sqlite:///{tmp_path}/mlflow.db", pipeline_run_id="p2",
                        trigger="reproduce", data_uri=str(tmp_path / "data"), expected_fingerprint=first.data_fingerprint)
    assert again.training_run_id == again.mlflow_run_id != first.training_run_id
    # The run's config is the recorded one, as register compares it with the version's lineage.
    assert json.loads(again.config_json) == json.loads(config)
    assert again.data_fingerprint == first.data_fingerprint  # the recorded data is still checked
