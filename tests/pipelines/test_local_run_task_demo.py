"""`ctpipe run --task NAME` without --data: the task's own demo data and the settings that go with it."""

from __future__ import annotations

from components.config import load_config
from pipelines.local_run import ensure_demo_data_for


def test_a_task_with_demo_data_gets_its_own_partitions_and_settings(tmp_path):
    uri, settings = ensure_demo_data_for(tmp_path, load_config(None, ["task.name=causal_lm"]))
    assert uri.endswith("data-causal_lm")
    assert len(list((tmp_path / "data-causal_lm").glob("date=*/part-0.parquet"))) == 4
    assert "data.key=doc_id" in settings and "select.metric=val_loss" in settings


def test_the_default_task_keeps_the_tabular_demo_and_its_key(tmp_path):
    uri, settings = ensure_demo_data_for(tmp_path, load_config(None, []))
    assert uri.endswith("/data") and settings == ["data.key=customer_id"]
