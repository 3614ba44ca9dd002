"""Tasks declare their key: causal_lm's own demo text validates with --data (split by doc_id); an identifier
given as a text feature is an error naming --set data.key=COLUMN."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_day_partition
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.components.tasks import load_task
from ctpipe.components.tasks.run_config import load_run_config
from ctpipe.components.tasks.task_key import task_key_setting, with_task_key


def validate(data: Path, out: Path, config: Config):
    return validate_data(str(data), config, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("text") / "data"
    load_task({"name": "causal_lm", "entrypoint": None, "options": {}}).write_demo_data(str(root), days=2)
    return root


def test_causal_lm_demo_text_given_as_data_is_split_by_its_doc_id(text, tmp_path):
    overrides = ["task.name=causal_lm"]
    config = with_task_key(load_run_config(None, overrides), str(text), None, overrides)
    assert config.data.key == "doc_id"
    result = validate(text, tmp_path, config)  # before: doc_id profiled as a categorical, "values to be in set"
    assert sum(result.rows.values()) > 0


def test_a_key_chosen_by_the_user_is_kept(text):
    task = load_task({"name": "causal_lm", "entrypoint": None, "options": {}})
    chosen = load_run_config(None, ["task.name=causal_lm", "data.key=null"])
    assert with_task_key(chosen, str(text), None, ["task.name=causal_lm", "data.key=null"]).data.key is None
    tabular = load_task({"name": "tabular_classification", "entrypoint": None, "options": {}})
    assert task_key_setting(tabular, Config(), str(text)) == []  # the tabular task declares no key
    assert task_key_setting(task, Config(), str(text)) == ["data.key=doc_id"]


def test_text_without_the_key_column_is_validated_as_before(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"text": [f"document number {i} " * int(rng.integers(3, 9)) for i in range(120)]})
    write_day_partition(tmp_path / "data", 0, frame)
    task = load_task({"name": "causal_lm", "entrypoint": None, "options": {}})
    assert task_key_setting(task, Config(), str(tmp_path / "data")) == []


def test_causal_lm_text_without_a_key_names_the_fix(text, tmp_path):
    config = load_run_config(None, ["task.name=causal_lm"])
    with pytest.raises(DataValidationError, match=r"--set data\.key=doc_id"):
        validate(text, tmp_path, config)
