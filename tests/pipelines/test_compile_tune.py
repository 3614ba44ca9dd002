"""The tune step in the compiled pipeline: absent by default (the DAG as before), and with ``tune.trials > 0``
between the sanity gate and training, whose config (and everything after it) is the one the search chose."""

import yaml

from ctpipe.components.lib.config import Config
from ctpipe.pipelines.compile import compile_pipeline
from ctpipe.pipelines.continuous_training import STEP_NAMES, step_names


def compiled_tasks(tmp_path, settings):
    out = tmp_path / "pipeline.yaml"
    compile_pipeline(out, None, settings, image=None)
    return next(yaml.safe_load_all(out.read_text()))["root"]["dag"]["tasks"]


def test_without_trials_the_pipeline_has_no_tune_step(tmp_path):
    tasks = compiled_tasks(tmp_path, [])
    assert {name.replace("-", "_") for name in tasks} == set(STEP_NAMES) == set(step_names(Config()))
    config = tasks["train"]["inputs"]["parameters"]["config_json"]["taskOutputParameter"]
    assert config == {"producerTask": "prepare-run", "outputParameterKey": "config_json"}


def test_with_trials_training_and_the_gate_take_the_chosen_config(tmp_path):
    tasks = compiled_tasks(tmp_path, ["tune.trials=8", "tune.trial_steps=50"])
    names = {name.replace("-", "_") for name in tasks}
    assert names == set(STEP_NAMES) | {"tune"}
    assert step_names(Config.from_dict({"tune": {"trials": 8}})).index("tune") == STEP_NAMES.index("train")
    tune = tasks["tune"]
    assert tune["cachingOptions"].get("enableCache") is True  # keyed like training: data, config and code
    # After the gate: the sanity step's output orders it.
    assert tune["inputs"]["parameters"]["sanity_summary"]["taskOutputParameter"]["producerTask"] == "sanity-checks"
    for step in ("train", "select-checkpoint", "evaluate", "register"):
        config = tasks[step]["inputs"]["parameters"]["config_json"]["taskOutputParameter"]
        assert config == {"producerTask": "tune", "outputParameterKey": "tuned_config_json"}, step
    # The gate before it judges the configured model, as without a search.
    assert tasks["sanity-checks"]["inputs"]["parameters"]["config_json"]["taskOutputParameter"]["producerTask"] == "prepare-run"
