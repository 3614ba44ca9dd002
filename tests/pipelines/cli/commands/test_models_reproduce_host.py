"""`ctpipe models reproduce VERSION --host URL`: the rebuild starts as a run of the deployed pipeline with trigger
`reproduce`, the version's recorded config and data and its data fingerprint, against a stand-in KFP API server
(tests/fakes/kfp_api.py: the real REST paths; it refuses parameters the compiled pipeline does not take)."""

from __future__ import annotations

import json

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.lineage import LINEAGE_DIGEST_TAG, write_lineage
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.compile import compile_pipeline
from ctpipe.pipelines.deploy import upload as deploy
from tests.fakes.kfp_api import FakeKfpServer

TOKEN = "test-token-123"
FINGERPRINT = "f" * 64


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> str:
    return str(compile_pipeline(tmp_path_factory.mktemp("compiled") / "pipeline.yaml", None, [], None))


@pytest.fixture
def server(monkeypatch, package):
    monkeypatch.setenv("KFP_TOKEN", TOKEN)
    with FakeKfpServer(token=TOKEN) as srv:
        deploy.deploy(deploy.connect(srv.url), package, version_name="v1")
        yield srv


def _version(home, config: Config, lineage: dict, tags: dict) -> Registry:
    """A version as register leaves it: ctpipe/lineage.json on its run, its digest and the data fingerprint tags."""
    registry = Registry(local_tracking_uri(home), config.registry)
    client = registry.client
    found = client.get_experiment_by_name("ctpipe")
    experiment = found.experiment_id if found else client.create_experiment(
        "ctpipe", artifact_location=(home / "mlartifacts").as_uri())
    run = client.create_run(experiment).info.run_id
    folder = home / run / "ctpipe"
    digest = write_lineage(folder / "lineage.json", lineage)
    client.log_artifact(run, str(folder / "lineage.json"), "ctpipe")
    registry.ensure_registered_model()
    client.create_model_version(registry.name, f"runs:/{run}/model", run_id=run,
                                tags={LINEAGE_DIGEST_TAG: digest, COMPLETE_TAG: "complete", **tags})
    return registry


def test_the_reproduction_starts_as_a_pipeline_run_with_trigger_reproduce_and_the_recorded_config(
        server, tmp_path, capsys):
    recorded = Config()
    recorded.train.max_steps, recorded.train.seed = 77, 4321  # not the compiled defaults: the recorded ones travel
    registry = _version(tmp_path, recorded, {"config": json.loads(recorded.to_json()), "data_uri": "s3://bucket/data"},
                        {"ctpipe.data_fingerprint": FINGERPRINT})
    aliases = registry.aliases()
    code = main(["models", "reproduce", "1", "--home", str(tmp_path), "--host", server.url])
    out, err = capsys.readouterr()
    assert code == 0, err
    printed = json.loads(out.strip().splitlines()[-1])
    run = server.state.runs[printed["run_id"]]
    parameters = run["runtime_config"]["parameters"]
    assert parameters["trigger"] == "reproduce" and printed["trigger"] == "reproduce" and printed["version"] == "1"
    assert parameters["data_uri"] == "s3://bucket/data" and parameters["data_fingerprint"] == FINGERPRINT
    assert json.loads(parameters["config_json"]) == json.loads(recorded.to_json())
    assert "config_overrides" not in parameters
    assert run["display_name"].startswith("ctpipe-reproduce-v1-")
    assert run["service_account"] == recorded.kubernetes.service_account
    # Starting it registered nothing and moved nothing here.
    assert [str(v.version) for v in registry.versions()] == ["1"] and registry.aliases() == aliases


def test_other_data_is_passed_on_and_a_version_without_a_recorded_config_is_refused(server, tmp_path, capsys):
    recorded = Config()
    _version(tmp_path, recorded, {"config": json.loads(recorded.to_json()), "data_uri": "s3://bucket/data"},
             {"ctpipe.data_fingerprint": FINGERPRINT})
    assert main(["models", "reproduce", "1", "--home", str(tmp_path), "--host", server.url,
                 "--data", "s3://copy/data"]) == 0
    run = server.state.runs[json.loads(capsys.readouterr().out.strip().splitlines()[-1])["run_id"]]
    assert run["runtime_config"]["parameters"]["data_uri"] == "s3://copy/data"
    # The same files elsewhere are the same data: the run's first step checks the recorded fingerprint there.
    assert run["runtime_config"]["parameters"]["data_fingerprint"] == FINGERPRINT

    # Version 2 was registered by a ctpipe that did not record its config.
    _version(tmp_path, recorded, {"data_uri": "s3://bucket/data"}, {"ctpipe.data_fingerprint": FINGERPRINT})
    runs = len(server.state.runs)
    code = main(["models", "reproduce", "2", "--home", str(tmp_path), "--host", server.url])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be reproduced on the cluster: it records no config" in err
    assert len(server.state.runs) == runs  # nothing started
    code = main(["models", "reproduce", "1", "--home", str(tmp_path), "--host", server.url, "--out", str(tmp_path)])
    assert code == 2 and "--out and --allow-platform-drift are for a rebuild on this machine" in capsys.readouterr().err
