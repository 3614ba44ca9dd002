"""The pipeline compiles for a cluster, loads back, documents every parameter and carries no secret."""

import re

import pytest
import yaml
from kfp import components as kfp_components

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import UserError
from ctpipe.pipelines.compile import compile_pipeline, compiled_config
from ctpipe.pipelines.continuous_training import STEP_NAMES


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = tmp_path_factory.mktemp("compiled") / "pipeline.yaml"
    compile_pipeline(out, None, [], image="registry.example.com/ctpipe:1.2.3")
    return out


def test_compiled_spec_loads_back(compiled):
    loaded = kfp_components.load_component_from_file(str(compiled))
    assert loaded.name == "ctpipe-continuous-training"
    assert set(loaded.component_spec.inputs) == {
        "data_uri",
        "trigger",
        "trigger_reason",  # what fired it (the watcher's drift or decay finding), recorded on the run and model
        "training_steps",
        "workers",
        "learning_rate",
        "batch_size",
        "blessing_allowed_change",
        "training_window_days",
        "config_json",
        "config_overrides",
        "mlflow_tracking_uri",
        "data_fingerprint",  # the data version a watcher's run is for (empty: any)
        "trigger_report_uri",  # the watcher's page of why it started, and its digest: shown in the KFP UI
        "trigger_report_sha256",
    }


def test_the_first_step_outputs_the_trigger_report_page_the_kfp_ui_renders(compiled):
    """The watcher's drift or decay page reaches the KFP UI as prepare run's HTML output artifact, from the two
    run parameters the watcher sets (where the page is, its SHA-256)."""
    spec = next(yaml.safe_load_all(compiled.read_text()))
    component = spec["components"]["comp-prepare-run"]
    artifact = component["outputDefinitions"]["artifacts"]["trigger_report"]["artifactType"]
    assert artifact["schemaTitle"] == "system.HTML"
    inputs = spec["root"]["dag"]["tasks"]["prepare-run"]["inputs"]["parameters"]
    for name in ("trigger_report_uri", "trigger_report_sha256"):
        assert inputs[name] == {"componentInputParameter": name}


def test_every_parameter_has_a_default_and_a_description(compiled):
    spec = next(yaml.safe_load_all(compiled.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    for name, param in params.items():
        assert "defaultValue" in param or param.get("isOptional"), name
        assert param.get("description"), f"parameter {name} has no description"


def test_only_the_steps_keyed_on_the_data_fingerprint_are_cached_and_none_retried(compiled):
    """validate..select take the data's fingerprint (prepare_run's output) and no per-run input, so KFP's
    cache reuses them; prepare_run (which fingerprints the moving data root), evaluate and register (judged
    against the champion of now) always run. A retried step that failed on bad input would fail the same way."""
    spec = next(yaml.safe_load_all(compiled.read_text()))
    tasks = spec["root"]["dag"]["tasks"]
    assert {name.replace("-", "_") for name in tasks} == set(STEP_NAMES)
    cached = {name.replace("-", "_") for name, task in tasks.items() if task.get("cachingOptions", {}).get("enableCache")}
    assert cached == {"validate_data", "sanity_checks", "train", "select_checkpoint"}
    for name, task in tasks.items():
        assert "retryPolicy" not in task, name
    fingerprint = tasks["validate-data"]["inputs"]["parameters"]["data_fingerprint"]["taskOutputParameter"]
    assert fingerprint == {"producerTask": "prepare-run", "outputParameterKey": "data_fingerprint"}
    for name in ("validate-data", "sanity-checks", "train", "select-checkpoint"):
        inputs = tasks[name]["inputs"]["parameters"]
        per_run = [k for k, v in inputs.items() if "PIPELINE_JOB_ID" in str(v) or "mlflow_run_id'" in str(v)
                   or v.get("taskOutputParameter", {}).get("outputParameterKey") == "mlflow_run_id"]
        assert not per_run, f"{name} takes per-run inputs {per_run}: its cache would never hit"


def test_a_config_with_caching_off_compiles_a_pipeline_without_cache(tmp_path):
    out = tmp_path / "p.yaml"
    compile_pipeline(out, None, ["pipeline.caching=false"], image=None)
    tasks = next(yaml.safe_load_all(out.read_text()))["root"]["dag"]["tasks"]
    assert not any(task.get("cachingOptions", {}).get("enableCache") for task in tasks.values())


def test_an_empty_config_json_runs_the_compiled_config_not_the_laptop_defaults(compiled):
    # Before: config_json="" (its description: "empty means the defaults of this pipeline version") fell back
    # to Config(), the laptop defaults: train.backend=local, so a cluster run trained in the train step's own
    # 1-CPU pod, and an override back to the local backend was not refused either.
    from ctpipe.components.lib.errors import ConfigError
    from ctpipe.components.run_config import resolve_config

    spec = next(yaml.safe_load_all(compiled.read_text()))
    # The run form's config_json is empty by default (not the whole config: issue 41), meaning the compiled one.
    assert spec["root"]["inputDefinitions"]["parameters"]["config_json"]["defaultValue"] == ""
    baked = spec["root"]["dag"]["tasks"]["prepare-run"]["inputs"]["parameters"]["default_config_json"]
    assert Config.from_json(baked["runtimeValue"]["constant"]) == compiled_config(spec)
    config = resolve_config(compiled=baked["runtimeValue"]["constant"], overrides="train.max_steps=70")
    assert config.train.backend == "auto" and config.train.max_steps == 70
    assert config.kubernetes.image == "registry.example.com/ctpipe:1.2.3"
    with pytest.raises(ConfigError, match="train.backend=local"):
        resolve_config(compiled=baked["runtimeValue"]["constant"], overrides="train.backend=local")


def test_every_step_runs_in_the_project_image_without_installing_kfp(compiled):
    spec = next(yaml.safe_load_all(compiled.read_text()))
    executors = spec["deploymentSpec"]["executors"]
    assert len(executors) == len(STEP_NAMES)
    for executor in executors.values():
        container = executor["container"]
        assert container["image"] == "registry.example.com/ctpipe:1.2.3"
        script = " ".join(container["command"])
        assert "pip install" not in script, "components must not pip-install at run time"


def test_cluster_settings_reference_secrets_by_name_only(tmp_path):
    out = tmp_path / "p.yaml"
    compile_pipeline(
        out,
        None,
        ["kubernetes.env_from_secrets={mlflow-credentials: [MLFLOW_TRACKING_USERNAME, MLFLOW_TRACKING_PASSWORD]}"],
        image=None,
    )
    text = out.read_text()
    assert "mlflow-credentials" in text
    # Nothing that looks like a credential value.
    assert not re.search(r"(?i)(password|secret|token)\s*[:=]\s*['\"]?[A-Za-z0-9+/]{12,}", text)


def test_credentials_in_tracking_uri_are_refused(tmp_path):
    with pytest.raises(UserError, match="credentials"):
        compile_pipeline(tmp_path / "p.yaml", None, ["registry.tracking_uri=http://admin:hunter2@mlflow:5000"], None)


def test_the_compiled_default_config_carries_the_text_column(tmp_path):

    out = tmp_path / "p.yaml"
    compile_pipeline(out, None, ["task.name=causal_lm", "data.text_column=body"], image=None)
    spec = next(yaml.safe_load_all(out.read_text()))
    assert compiled_config(spec).data.text_column == "body"
