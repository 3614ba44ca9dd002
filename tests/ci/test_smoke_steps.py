"""ci/smoke_steps.py, which ci/smoke_images.sh runs in the component image: the command it writes is the compiled
component's, with an executor input that KFP's own executor accepts and maps to the launcher's paths."""

from __future__ import annotations

import importlib.util
import json

import pytest

from tests.fixtures.paths import REPO_ROOT


@pytest.fixture(scope="module")
def smoke_steps():
    spec = importlib.util.spec_from_file_location("smoke_steps", REPO_ROOT / "ci" / "smoke_steps.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def work(smoke_steps, tmp_path_factory):
    work = tmp_path_factory.mktemp("smoke")
    smoke_steps.prepare(work)
    return work


def test_the_validate_command_is_the_compiled_components_with_a_launchers_executor_input(smoke_steps, work):
    from kfp.dsl.executor import Executor

    from ctpipe.components.lib.config import Config
    from ctpipe.components.steps.validate_data.component import validate_data

    smoke_steps.main(["command", "validate_data", str(work)])
    argv = (work / "validate_data.argv").read_bytes().split(b"\0")[:-1]
    argv = [part.decode() for part in argv]
    container = validate_data.component_spec.implementation.container
    assert argv[:len(container.command)] == container.command
    assert argv[-2:] == ["--function_to_execute", "validate_data"]
    executor_input = json.loads(argv[argv.index("--executor_input") + 1])
    assert executor_input["outputs"]["outputFile"] == "/tmp/kfp_outputs/output_metadata.json"
    assert executor_input["outputs"]["parameters"]["fingerprint"] == {"outputFile": "/tmp/kfp/outputs/fingerprint"}
    parameters = executor_input["inputs"]["parameterValues"]
    assert parameters["data_uri"] == "/data" and Config.from_json(parameters["config_json"]).train.workers == 2
    # KFP's executor takes it as a pod's launcher hands it over: artifacts under /minio, where KFP mounts them.
    executor = Executor(executor_input, validate_data.python_func)
    snapshot = executor.get_output_artifact("snapshot")
    assert snapshot.schema_title == "system.Dataset"
    assert snapshot.path == "/minio/mlpipeline/v2/artifacts/ctpipe-smoke/run-1/validate-data/snapshot"


def test_inputs_come_from_what_the_producer_recorded(smoke_steps, work):
    from kfp.dsl.executor import Executor

    from ctpipe.components.steps.select_checkpoint.component import select_checkpoint

    recorded = work / "outputs" / "validate-data"
    recorded.mkdir(parents=True)
    uri = f"{smoke_steps.PIPELINE_ROOT}/validate-data/snapshot"
    (recorded / "output_metadata.json").write_text(json.dumps(
        {"artifacts": {"snapshot": {"artifacts": [{"name": "snapshot", "uri": uri, "metadata": {"rows": 1200}}]}}}))
    executor_input = smoke_steps.executor_input(
        "select_checkpoint", work, {"snapshot": "validate-data/snapshot", "checkpoints": "train/checkpoints"})
    executor = Executor(executor_input, select_checkpoint.python_func)
    snapshot = executor.get_input_artifact("snapshot")
    assert snapshot.uri == uri and snapshot.metadata == {"rows": 1200}
    assert executor.get_input_artifact("checkpoints").path.endswith("/run-1/train/checkpoints")
    assert executor.get_output_artifact("model").path == "/minio/mlpipeline/v2/artifacts/ctpipe-smoke/run-1/select-checkpoint/model"
