"""What `ctpipe models reproduce` checks before it rebuilds anything (pipelines/local/reproduce.py), on a lineage
recorded from real files, task code and platform facts: it passes as recorded, and each change is refused naming
what changed. The rebuild itself, from a version registered by the steps: test_models_reproduce.py (e2e)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.files import fingerprint_files, list_data_files
from ctpipe.components.lib.platform_facts import platform_facts
from ctpipe.components.lib.registry.tags import REPRODUCTION_TAG, reproduction_record
from ctpipe.components.steps.register.reproduction import compare_metrics as _compare_metrics
from ctpipe.components.steps.register.reproduction import largest_difference as _largest_difference
from ctpipe.components.tasks import task_record
from ctpipe.components.tasks.code_identity import task_code_identity
from ctpipe.pipelines.local.reproduce import ReproductionRefused, check_reproducible


@pytest.fixture()
def recorded(tmp_path):
    """(lineage, tags, data directory) as registration records them for data trained on here."""
    data = tmp_path / "data"
    write_demo_data(data, days=3, rows_per_day=20, seed=1)
    config = Config()
    files = list_data_files(str(data))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lineage = {
        "config": json.loads(config.to_json()),
        "data_uri": str(data),
        "data_files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in files],
        "task_code": task_code_identity(task_record(config.task)),
        "platform": platform_facts(device_type=device, world_size=config.train.workers, dtype="float32",
                                   threads=config.train.threads_per_worker),
    }
    return lineage, {"ctpipe.data_fingerprint": fingerprint_files(files)}, data


def test_the_recorded_data_code_and_platform_pass(recorded):
    lineage, tags, data = recorded
    config, uri, drift = check_reproducible("version 1", lineage, tags, None)
    assert uri == str(data) and drift == [] and config.train.seed == Config().train.seed


def test_changed_removed_and_added_partitions_are_named(recorded, tmp_path):
    lineage, tags, data = recorded
    parts = sorted(p for p in data.iterdir() if p.name.startswith("date="))
    changed = next(parts[0].glob("*.parquet"))
    frame = pd.read_parquet(changed)
    frame.iloc[0, -1] = frame.iloc[1, -1] if frame.iloc[0, -1] != frame.iloc[1, -1] else frame.iloc[2, -1]
    frame.to_parquet(changed)
    for f in parts[1].iterdir():
        f.unlink()
    parts[1].rmdir()
    (data / "date=2031-01-01").mkdir()
    frame.to_parquet(data / "date=2031-01-01" / "part-0.parquet")
    with pytest.raises(ReproductionRefused) as err:
        check_reproducible("version 1", lineage, tags, None)
    message = str(err.value)
    assert f"changed: {parts[0].name}" in message and f"missing: {parts[1].name}" in message
    assert "added: date=2031-01-01" in message and tags["ctpipe.data_fingerprint"][:12] in message


def test_the_same_files_elsewhere_are_the_same_data(recorded, tmp_path):
    import shutil

    lineage, tags, data = recorded
    shutil.copytree(data, tmp_path / "copy")
    assert check_reproducible("version 1", lineage, tags, str(tmp_path / "copy"))[1] == str(tmp_path / "copy")


def test_other_task_code_is_refused_naming_the_module(recorded):
    lineage, tags, _ = recorded
    lineage["task_code"] = {**lineage["task_code"], "source_sha256": "0" * 64}
    with pytest.raises(ReproductionRefused) as err:
        check_reproducible("version 1", lineage, tags, None)
    assert f"module '{lineage['task_code']['source']}'" in str(err.value)
    assert "source_sha256: recorded '0000" in str(err.value)


def test_another_torch_is_refused_unless_allowed_and_then_named(recorded):
    lineage, tags, _ = recorded
    lineage["platform"] = {**lineage["platform"], "torch": "2.0.0", "world_size": 8}
    with pytest.raises(ReproductionRefused) as err:
        check_reproducible("version 1", lineage, tags, None)
    assert f"torch: recorded '2.0.0', here {torch.__version__!r}" in str(err.value)
    assert "world_size: recorded 8" in str(err.value) and "--allow-platform-drift" in str(err.value)
    _, _, drift = check_reproducible("version 1", lineage, tags, None, allow_platform_drift=True)
    assert [line.split(":")[0] for line in drift] == ["torch", "world_size"]


def test_a_lineage_without_the_facts_is_refused_naming_them(recorded):
    lineage, tags, _ = recorded
    del lineage["platform"], lineage["data_files"]
    with pytest.raises(ReproductionRefused, match="does not record data_files, platform"):
        check_reproducible("version 1", lineage, tags, None)


def test_the_largest_parameter_and_metric_differences():
    a = {"w": torch.zeros(3), "b": torch.ones(2)}
    b = {"w": torch.tensor([0.0, 0.25, -0.5]), "b": torch.ones(2)}
    assert _largest_difference(a, a) == (0.0, None)
    assert _largest_difference(a, b) == (0.5, "w")
    assert _largest_difference(a, {"w": torch.zeros(3)})[0] == math.inf
    metrics = _compare_metrics({"accuracy": 0.75, "nll": math.nan}, {"accuracy": 0.5, "nll": math.nan})
    assert metrics["accuracy"]["difference"] == 0.25 and metrics["nll"]["difference"] == 0.0


def test_the_reproduction_tag_reads_back_and_ignores_what_is_not_ours():
    tag = json.dumps({"at": "2026-11-29T10:00:00Z", "result": "identical", "weights_sha256": "ab" * 8,
                      "max_param_diff": 0.0, "max_metric_diff": 0.0})
    assert reproduction_record({REPRODUCTION_TAG: tag})["result"] == "identical"
    assert reproduction_record({}) is None and reproduction_record({REPRODUCTION_TAG: "by hand"}) is None
