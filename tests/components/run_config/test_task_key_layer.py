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
from ctpipe.components.run_config import load_config, resolve_config, resolve_layers
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.components.tasks import load_task


def validate(data: Path, out: Path, config: Config):
    return validate_data(str(data), config, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                         report_path=str(out / "report.md"), tracking_uri="", mlflow_run_id="")


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("text") / "data"
    load_task({"name": "causal_lm", "entrypoint": None, "options": {}}).demo.write_data(str(root), days=2)
    return root


def test_causal_lm_demo_text_given_as_data_is_split_by_its_doc_id(text, tmp_path):
    resolved = resolve_layers(settings=["task.name=causal_lm"], data_uri=str(text))
    config = resolved.config
    assert config.data.key == "doc_id" and resolved.origin_of("data.key") == "task key"
    result = validate(text, tmp_path, config)  # before: doc_id profiled as a categorical, "values to be in set"
    assert sum(result.rows.values()) > 0


def test_a_key_chosen_by_the_user_is_kept(text):
    assert resolve_config(settings=["task.name=causal_lm", "data.key=null"], data_uri=str(text)).data.key is None
    assert resolve_config(settings=["task.name=causal_lm", "data.key=title"], data_uri=str(text)).data.key == "title"
    assert resolve_config(data_uri=str(text)).data.key is None  # the tabular task declares no key


def test_text_without_the_key_column_is_validated_as_before(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"text": [f"document number {i} " * int(rng.integers(3, 9)) for i in range(120)]})
    write_day_partition(tmp_path / "data", 0, frame)
    assert resolve_config(settings=["task.name=causal_lm"], data_uri=str(tmp_path / "data")).data.key is None


def test_causal_lm_text_without_a_key_names_the_fix(text, tmp_path):
    config = load_config(None, ["task.name=causal_lm"])
    with pytest.raises(DataValidationError, match=r"--set data\.key=doc_id"):
        validate(text, tmp_path, config)
