"""`ctpipe run` honours KFP's local cache: a step taken from it gets a ``cached`` record, and the summary says so."""

import json

from kfp import dsl, local

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.pipelines.local.local_cache import cache_hits_recorded
from ctpipe.pipelines.local.run_summary import format_summary
from tests.fixtures.step_records import summary_of


@dsl.component(install_kfp_package=False)
def validate_data(text: str) -> str:
    return text.upper()


@dsl.component(install_kfp_package=False)
def evaluate(text: str) -> str:
    return text + "!"


@dsl.pipeline
def two_steps(text: str = "x"):
    first = validate_data(text=text)
    evaluate(text=first.output).set_caching_options(False)


def _run(status_dir, root) -> None:
    status_dir.mkdir()
    local.init(local.SubprocessRunner(use_venv=False), pipeline_root=str(root), enable_caching=True)
    with cache_hits_recorded(status_dir):
        two_steps(text="data")


def test_a_step_from_kfps_local_cache_is_recorded_as_cached(tmp_path):
    _run(tmp_path / "first", tmp_path / "root")
    assert not (tmp_path / "first" / "validate_data.json").exists()  # it ran (and wrote no record here)
    _run(tmp_path / "second", tmp_path / "root")
    record = json.loads((tmp_path / "second" / "validate_data.json").read_text())
    assert record["status"] == "cached"
    assert not (tmp_path / "second" / "evaluate.json").exists()  # caching off for it: it ran


def test_the_summary_lists_the_cached_steps_and_a_version_registered_before(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    with step_status("prepare_run") as record:
        record.result = {"pipeline_run_id": "42", "mlflow_run_id": "abc", "training_run_id": "t1",
                         "data_fingerprint": "f" * 64}
    for step in ("validate_data", "sanity_checks", "train", "select_checkpoint"):
        (tmp_path / f"{step}.json").write_text(json.dumps({"step": step, "status": "cached", "seconds": 0.0}))
    with step_status("evaluate") as record:
        record.result = {"blessed": True, "reasons": [], "candidate_metrics": {"accuracy": 0.9}}
    with step_status("register") as record:
        record.result = {"version": "3", "aliases": ["champion"], "created": False, "promoted": False}
    summary = summary_of(tmp_path)
    assert summary["status"] == "succeeded"
    assert summary["cached_steps"] == ["validate_data", "sanity_checks", "train", "select_checkpoint"]
    assert summary["training_mlflow_run_id"] == "t1" and summary["registered_new_version"] is False
    # Issue 46: a cached run's summary said data_fingerprint null; it is prepare's, the content's fingerprint.
    assert summary["data_fingerprint"] == "f" * 64
    text = format_summary(summary)
    assert "from cache         validate_data, sanity_checks, train, select_checkpoint" in text
    assert "registered         nothing new: this model is already" in text and "version 3" in text
