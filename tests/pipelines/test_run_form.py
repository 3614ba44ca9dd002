"""The Kubeflow UI's run form: typed, described pipeline parameters with the compiled config's values as defaults."""

import pytest
import yaml

from ctpipe.components.run_config.run_form import KNOBS
from ctpipe.pipelines.compile import compile_pipeline

TYPED = {knob.name: "NUMBER_INTEGER" if knob.type is int else "NUMBER_DOUBLE" for knob in KNOBS}


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("form") / "pipeline.yaml"
    compile_pipeline(out, None, ["train.max_steps=321", "train.workers=4", "train.lr=0.002", "data.window_days=30"],
                     image=None)
    return next(yaml.safe_load_all(out.read_text()))


def test_the_run_form_has_typed_parameters_with_the_compiled_configs_values_and_descriptions(spec):
    params = spec["root"]["inputDefinitions"]["parameters"]
    for name, kind in TYPED.items():
        assert params[name]["parameterType"] == kind, name
        assert len(params[name].get("description", "")) > 30, f"{name} has no useful description"
    # Integers come back as floats from the compiled IR (kfp 2.17): compare as numbers.
    defaults = {name: params[name]["defaultValue"] for name in TYPED}
    assert defaults == {"training_steps": 321, "workers": 4, "learning_rate": 0.002, "batch_size": 64,
                        "blessing_allowed_change": 0.0, "training_window_days": 30}
    assert "train.max_steps" in params["training_steps"]["description"]


def test_the_compiled_pipeline_parses_as_kfp_protobuf(spec):
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    parsed = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    root = parsed.root.input_definitions.parameters
    assert root["training_steps"].default_value.number_value == 321
    assert root["training_steps"].parameter_type == pipeline_spec_pb2.ParameterType.NUMBER_INTEGER
    assert parsed.root.dag.tasks["train"].caching_options.enable_cache is True


def test_prepare_run_gets_every_knob_from_the_form(spec):
    """Each knob reaches prepare_run inside its one run_form text, which KFP fills in at run time."""
    inputs = spec["root"]["dag"]["tasks"]["prepare-run"]["inputs"]["parameters"]
    text = inputs["run_form"]["runtimeValue"]["constant"]
    for name in TYPED:
        assert inputs[f"pipelinechannel--{name}"] == {"componentInputParameter": name}
        assert f"{name}={{{{$.inputs.parameters['pipelinechannel--{name}']}}}}" in text.splitlines()
