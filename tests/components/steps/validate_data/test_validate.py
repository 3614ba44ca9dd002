"""validate_data on good data: what it writes, stable splits, the champion's suite, MLflow, user errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.lib.tracking import ensure_experiment, local_tracking_uri
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.corpus import KEY, write_clean


def config(**validation) -> Config:
    return Config.from_dict({"data": {"key": KEY}, "validation": validation})


def run(data: Path, out: Path, cfg: Config | None = None, *, tracking_uri: str = "", run_id: str = ""):
    return validate_data(str(data), cfg or config(), snapshot_dir=str(out / "snapshot"),
                         data_docs_path=str(out / "docs.html"), report_path=str(out / "report.md"),
                         tracking_uri=tracking_uri, mlflow_run_id=run_id)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("clean")
    data = write_clean(tmp / "data")
    return data, tmp / "out", run(data, tmp / "out")


def test_clean_data_writes_snapshot_suite_and_reference_stats(clean_run):
    data, out, result = clean_run
    assert len(result.fingerprint) == 64
    assert sum(result.rows.values()) == 900 and result.rows["train"] > result.rows["val"] > 0
    snap = load_snapshot(out / "snapshot")
    assert snap.schema.key == KEY and "region" in snap.schema.categorical and "tenure_months" in snap.schema.numeric
    # The suite is GX 1.x JSON that GX itself loads back, with severities and the per-partition rows rule.
    from great_expectations.core.expectation_suite import ExpectationSuite

    suite = json.loads((out / "snapshot" / "suite.json").read_text())
    assert len(ExpectationSuite(**suite).expectations) == len(suite["expectations"])
    severities = {e["severity"] for e in suite["expectations"]}
    assert severities == {"critical", "warning"}
    assert any(e["meta"].get("ctpipe_table") == "partitions" for e in suite["expectations"])
    stats = json.loads((out / "snapshot" / "reference_stats.json").read_text())
    assert stats["rows"] == result.rows["train"]
    tenure = stats["numeric"]["tenure_months"]
    assert len(tenure["quantiles"]) == 101 and tenure["quantiles"] == sorted(tenure["quantiles"])
    assert 0 < len(tenure["sample"]) <= 5000 and {"mean", "std", "null_fraction"} <= set(tenure)
    assert stats["numeric"]["sessions_last_30d"]["null_fraction"] > 0
    assert sum(stats["categorical"]["region"]["frequencies"].values()) == result.rows["train"]
    verdict = json.loads((out / "snapshot" / "validation.json").read_text())
    assert verdict["passed"] is True and verdict["warnings"] == result.warnings and verdict["findings"]


def test_data_docs_open_on_their_own(clean_run):
    _, out, _ = clean_run
    page = (out / "docs.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "PASSED" in page
    # No external assets or scripts: the page renders inside the KFP UI's sandboxed frame or from disk.
    assert not re.search(r"<script|<link|src=|https?://", page)
    for column in ("tenure_months", "region", "label"):
        assert column in page
    md = (out / "report.md").read_text()
    assert md.startswith("# Data validation: PASSED") and "expect_column_values_to_be_between" in md


def test_rows_keep_their_split_as_partitions_are_added(tmp_path):
    write_demo_data(tmp_path / "data", days=2, rows_per_day=300)
    run(tmp_path / "data", tmp_path / "a")
    write_demo_data(tmp_path / "data", days=4, rows_per_day=300)  # two new days; old files unchanged
    run(tmp_path / "data", tmp_path / "b")

    def split_of(out: Path) -> dict[int, str]:
        snap = load_snapshot(out / "snapshot")
        return {k: s for s in ("train", "val", "test") for k in snap.frame(s)[KEY]}

    before, after = split_of(tmp_path / "a"), split_of(tmp_path / "b")
    assert len(after) == 1200 and set(before) < set(after)
    assert all(after[k] == s for k, s in before.items())


def test_without_a_key_the_content_hash_splits_stably(tmp_path):
    data = write_clean(tmp_path / "data")
    cfg = Config.from_dict({"data": {"key": None, "features": ["tenure_months", "monthly_spend", "region"]}})
    first = run(data, tmp_path / "a", cfg)
    second = run(data, tmp_path / "b", cfg)
    assert first.rows == second.rows
    assert load_snapshot(tmp_path / "a" / "snapshot").schema.features == ["tenure_months", "monthly_spend", "region"]


def _register_champion(tracking_uri: str, snapshot: Path, name: str, tags: dict | None = None) -> None:
    """A model version whose run holds reference/suite.json and reference_stats.json, aliased champion."""
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    experiment = ensure_experiment(tracking_uri, "ctpipe")
    run_id = client.create_run(experiment).info.run_id
    for file in ("suite.json", "reference_stats.json"):
        client.log_artifact(run_id, str(snapshot / file), artifact_path="reference")
    client.create_registered_model(name)
    version = client.create_model_version(name, source=f"runs:/{run_id}/ctpipe", run_id=run_id, tags=tags)
    client.set_registered_model_alias(name, "champion", version.version)


def test_champion_suite_is_the_reference_and_results_go_to_mlflow(tmp_path, clean_run):
    _, clean_out, _ = clean_run
    uri = local_tracking_uri(tmp_path)
    _register_champion(uri, clean_out / "snapshot", "ctpipe-classifier")
    client = mlflow.MlflowClient(tracking_uri=uri)
    run_id = client.create_run(ensure_experiment(uri, "ctpipe")).info.run_id

    data = write_clean(tmp_path / "new", days=2, seed=3)
    part = sorted(data.glob("date=*/part-0.parquet"))[-1]
    frame = pd.read_parquet(part)
    frame.loc[frame.index[:60], "device"] = "smartwatch"  # unseen by the champion's suite
    frame.to_parquet(part, index=False)
    with pytest.raises(DataValidationError) as caught:
        run(data, tmp_path / "out", tracking_uri=uri, run_id=run_id)
    message = str(caught.value)
    assert "'device'" in message and "champion ctpipe-classifier v1" in message
    logged = client.get_run(run_id)
    assert logged.data.metrics["validation.errors"] >= 1
    assert logged.data.tags["ctpipe.validation"] == "failed"
    artifacts = {a.path for a in client.list_artifacts(run_id, "validation")}
    assert {"validation/data_docs.html", "validation/validation_report.md", "validation/summary.json"} <= artifacts


def test_a_champion_of_another_task_is_named_instead_of_its_columns(tmp_path, clean_run):
    """A user's task run on a home whose champion (same registry.model_name) is another task's model. Before:
    one 'column dropped' error per column of the other task's suite (9 for the demo), naming none of the
    cause. Now one error: the champion's task, this run's, and the settings that fix it. A champion of the
    same task passes as before."""
    _, clean_out, _ = clean_run
    uri = local_tracking_uri(tmp_path)
    other = json.dumps({"name": "digits", "entrypoint": "digits_task:make_task"})
    _register_champion(uri, clean_out / "snapshot", "ctpipe-classifier", tags={"ctpipe.task_code": other})
    with pytest.raises(DataValidationError) as caught:
        run(write_clean(tmp_path / "new", days=2, seed=3), tmp_path / "out", tracking_uri=uri)
    message = str(caught.value)
    assert "with 1 error(s)" in message and "column dropped" not in message
    assert "champion ctpipe-classifier v1 is a model of task 'digits' (task.entrypoint digits_task:make_task)" in message
    assert "this run's task is 'tabular_classification' (built-in)" in message
    assert "--set registry.model_name=" in message and "validation.use_champion_suite=false" in message
    assert "Fix the data" not in message  # nothing is wrong with the data

    same = json.dumps({"name": "tabular_classification", "entrypoint": "ctpipe.components.tasks.tabular:make_task"})
    _register_champion(uri := local_tracking_uri(tmp_path / "same"), clean_out / "snapshot", "ctpipe-classifier",
                       tags={"ctpipe.task_code": same})
    assert run(write_clean(tmp_path / "same-data", days=2, seed=3), tmp_path / "out2", tracking_uri=uri).rows


def test_drifted_partition_is_reported_as_skew_warning(tmp_path):
    write_demo_data(tmp_path / "data", days=4, rows_per_day=400, drift_from_day=3)
    result = run(tmp_path / "data", tmp_path / "out")
    skewed = [w for w in result.warnings if "shifted from the reference" in w]
    assert any("'region'" in w for w in skewed) and any("'satisfaction'" in w for w in skewed)


def test_a_constant_feature_is_a_warning_and_an_integer_identifier_an_error_naming_the_key(tmp_path):
    data = write_clean(tmp_path / "data")
    for part in sorted(data.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        frame["country"] = "nl"
        frame.to_parquet(part, index=False)
    result = run(data, tmp_path / "out")
    assert any("'country' is constant" in w for w in result.warnings)
    # Before: the integer customer_id read as a feature (data.key=null) was only a warning.
    with pytest.raises(DataValidationError) as caught:
        run(data, tmp_path / "out2", Config.from_dict({"data": {"key": None}}))
    assert "'customer_id'" in str(caught.value) and "--set data.key=customer_id" in str(caught.value)


@pytest.mark.parametrize(
    ("setup", "cfg", "needles"),
    [
        ("missing", config(), ("does not exist", "--data")),
        ("empty", config(), ("no Parquet", "demo-data")),
        ("ok", Config.from_dict({"data": {"label": "target", "key": KEY}}), ("'target'", "data.label")),
        ("ok", config(suite_path="/no/such/suite.json"), ("/no/such/suite.json", "validation.suite_path")),
        # Before: found by the evaluate step, after the whole training.
        ("ok", Config.from_dict({"data": {"key": KEY}, "evaluate": {"slices": ["regoin"]}}),
         ("evaluate.slices names column 'regoin'", "judged after training")),
    ],
)
def test_user_errors_are_one_paragraph_and_still_reported(tmp_path, setup, cfg, needles):
    data = tmp_path / "data"
    if setup == "empty":
        data.mkdir()
    elif setup == "ok":
        write_clean(data, days=1)
    with pytest.raises(DataValidationError) as caught:
        run(data, tmp_path / "out", cfg)
    message = str(caught.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message
    assert (tmp_path / "out" / "report.md").read_text().startswith("# Data validation: FAILED")


def test_non_text_categories_and_integer_labels_round_trip_through_the_suite(tmp_path):
    """Boolean and integer categories, integer labels: the suite compares native values, not strings."""
    data = write_clean(tmp_path / "data", days=2)
    for part in sorted(data.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        frame["is_premium"] = frame["plan"].isin(["pro", "enterprise"])
        frame["zone"] = frame[KEY] % 7
        frame["label"] = frame["label"].map({"churn": 0, "downgrade": 1, "stay": 2, "upgrade": 3})
        frame.to_parquet(part, index=False)
    cfg = Config.from_dict({"data": {"key": KEY, "categorical": ["zone"]}})
    first = run(data, tmp_path / "a", cfg)
    suite = tmp_path / "a" / "snapshot" / "suite.json"
    sets = {e["kwargs"]["column"]: e["kwargs"]["value_set"] for e in json.loads(suite.read_text())["expectations"]
            if e["type"] == "expect_column_values_to_be_in_set"}
    assert sets["is_premium"] == [False, True] and sets["zone"] == list(range(7)) and sets["label"] == [0, 1, 2, 3]
    again = run(data, tmp_path / "b", Config.from_dict({"data": {"key": KEY, "categorical": ["zone"]},
                                                         "validation": {"suite_path": str(suite)}}))
    assert first.warnings == again.warnings == []


def test_drifted_data_warns_against_the_reference_suite_but_is_not_stopped(tmp_path):
    """Drift is a reason to retrain: against the clean data's suite it warns, it does not fail the run."""
    clean = write_clean(tmp_path / "clean", days=4, rows_per_day=400)
    run(clean, tmp_path / "ref")
    write_demo_data(tmp_path / "drifted", days=4, rows_per_day=400, seed=1, drift_from_day=1)
    result = run(tmp_path / "drifted", tmp_path / "out",
                 config(suite_path=str(tmp_path / "ref" / "snapshot" / "suite.json")))
    assert any("between" in w for w in result.warnings), result.warnings


def test_the_reports_a_person_is_shown_open_as_what_they_are(tmp_path):
    """KFP names output files after the output alone (``data_docs``, ``validation_report``): the paths printed
    (the failure message, the step's result) must be copies with their extensions, or a browser shows source."""
    from tests.fixtures.corpus import corrupt_parquet

    def kfp_named(data: Path, out: Path):
        return validate_data(str(data), config(), snapshot_dir=str(out / "snapshot"),
                             data_docs_path=str(out / "data_docs"), report_path=str(out / "validation_report"),
                             tracking_uri="", mlflow_run_id="")

    result = kfp_named(write_clean(tmp_path / "good"), tmp_path / "ok")
    assert result.data_docs == str(tmp_path / "ok" / "data_docs.html")
    assert result.report == str(tmp_path / "ok" / "validation_report.md")
    assert Path(result.data_docs).read_text() == (tmp_path / "ok" / "data_docs").read_text()
    assert result.summary()["data_docs"] == result.data_docs

    bad = write_clean(tmp_path / "bad")
    corrupt_parquet(bad)  # an error without a reference suite (a column gone from every partition is not)
    with pytest.raises(DataValidationError) as caught:
        kfp_named(bad, tmp_path / "failed")
    named = {p for p in re.findall(r"(/\S+?)[.,;]?(?:\s|$)", str(caught.value)) if p.startswith(str(tmp_path / "failed"))}
    assert named == {str(tmp_path / "failed" / "validation_report.md"), str(tmp_path / "failed" / "data_docs.html")}
    assert all(Path(p).is_file() for p in named)
    assert Path(tmp_path / "failed" / "data_docs.html").read_text().startswith("<!DOCTYPE html>")
