"""Compiling (and submitting) for a cluster gives a cluster pipeline: a Kubeflow training job, MLflow
credentials from the secret manifests/ creates; a local backend or no credentials is refused."""

from __future__ import annotations

import pytest
import yaml

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import ConfigError, UserError
from ctpipe.pipelines.cli.main import main
from ctpipe.pipelines.compile import compile_pipeline, compiled_config

CREDENTIALS = {"ctpipe-mlflow-client": ["MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"]}


def _compiled(path) -> tuple[Config, dict]:
    spec, platform = yaml.safe_load_all(path.read_text())
    config = compiled_config(spec)
    return config, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]


def test_a_plain_compile_is_a_cluster_pipeline(tmp_path):
    config, executors = _compiled(compile_pipeline(tmp_path / "p.yaml", None, [], image=None))
    # A stock Kubeflow of 2026 installs Trainer v2 and no PyTorchJob: the job kind is found at run time.
    assert config.train.backend == "auto"
    assert config.kubernetes.env_from_secrets == CREDENTIALS
    for name, executor in executors.items():
        secrets = {s["secretName"]: [k["envVar"] for k in s["keyToEnv"]] for s in executor["secretAsEnv"]}
        assert secrets == CREDENTIALS, name


def test_the_compiled_pipeline_parses_as_kfp_protobuf(tmp_path):
    """What the KFP API server does with an upload: both documents parse strictly into KFP's protobuf messages."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    spec, platform = yaml.safe_load_all(compile_pipeline(tmp_path / "p.yaml", None, [], image=None).read_text())
    parsed = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    baked = parsed.root.dag.tasks["prepare-run"].inputs.parameters["default_config_json"]
    assert Config.from_json(baked.runtime_value.constant.string_value).train.backend == "auto"
    json_format.ParseDict(platform, pipeline_spec_pb2.PlatformSpec())


def test_told_otherwise_the_cluster_defaults_give_way(tmp_path):
    other = "{team-mlflow: [MLFLOW_TRACKING_TOKEN]}"
    config, _ = _compiled(compile_pipeline(tmp_path / "p.yaml", None, ["train.backend=trainjob",
                                                                       f"kubernetes.env_from_secrets={other}"], None))
    assert config.train.backend == "trainjob"
    assert config.kubernetes.env_from_secrets == {"team-mlflow": ["MLFLOW_TRACKING_TOKEN"]}


def test_a_local_backend_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.backend.*'local'.*pytorchjob"):
        compile_pipeline(tmp_path / "p.yaml", None, ["train.backend=local"], image=None)
    config_file = tmp_path / "c.yaml"
    config_file.write_text("train:\n  backend: local\n")
    with pytest.raises(ConfigError, match="step pod"):
        compile_pipeline(tmp_path / "p.yaml", str(config_file), [], image=None)
    assert not (tmp_path / "p.yaml").exists()


@pytest.mark.parametrize("secrets", ["{}", "{ctpipe-object-store: [AWS_ACCESS_KEY_ID]}",
                                     "{ctpipe-mlflow-client: [MLFLOW_TRACKING_USERNAME]}"])
def test_missing_mlflow_credentials_are_refused(tmp_path, secrets):
    with pytest.raises(ConfigError) as err:
        compile_pipeline(tmp_path / "p.yaml", None, [f"kubernetes.env_from_secrets={secrets}"], image=None)
    text = str(err.value)
    assert "kubernetes.env_from_secrets" in text and "MLFLOW_TRACKING_PASSWORD" in text
    assert "ctpipe-mlflow-client" in text  # the fix: the secret manifests/secrets creates


def test_the_cli_exits_2_with_the_reason(tmp_path, capsys):
    assert main(["compile", "--out", str(tmp_path / "p.yaml"), "--set", "train.backend=local"]) == 2
    assert "train.backend" in capsys.readouterr().err


def test_submit_to_kfp_sends_a_cluster_config(tmp_path, monkeypatch, capsys):
    """`ctpipe submit --host --config FILE` sends the file as config_json: it must not bring back `local`."""
    from ctpipe.pipelines.deploy import upload as deploy
    from tests.fakes.kfp_api import FakeKfpServer

    monkeypatch.setenv("KFP_TOKEN", "t")
    package = compile_pipeline(tmp_path / "p.yaml", None, [], image=None)
    config_file = tmp_path / "c.yaml"
    config_file.write_text("train:\n  max_steps: 50\n")
    with FakeKfpServer(token="t") as server:
        deploy.deploy(deploy.connect(server.url), str(package), version_name="v1")
        assert main(["submit", "--host", server.url, "--config", str(config_file)]) == 0
        (run,) = server.state.runs.values()
        sent = Config.from_json(run["runtime_config"]["parameters"]["config_json"])
        assert sent.train.backend == "auto" and sent.train.max_steps == 50
        assert sent.kubernetes.env_from_secrets == CREDENTIALS
        config_file.write_text("train:\n  backend: local\n")
        assert main(["submit", "--host", server.url, "--config", str(config_file)]) == 2
        assert "train.backend" in capsys.readouterr().err
        assert len(server.state.runs) == 1


def test_credentials_in_the_tracking_uri_are_still_refused(tmp_path):
    with pytest.raises(UserError, match="credentials"):
        compile_pipeline(tmp_path / "p.yaml", None, ["registry.tracking_uri=http://admin:pw@mlflow:5000"], None)


def test_watch_on_kfp_sends_a_cluster_config(tmp_path, monkeypatch, capsys):
    """`ctpipe watch --host --config FILE` starts runs with the file as config_json: cluster defaults, not `local`."""
    import json

    from ctpipe.components.lib.data.demo import write_demo_data
    from ctpipe.pipelines.deploy import upload as deploy
    from tests.fakes.kfp_api import FakeKfpServer

    monkeypatch.setenv("KFP_TOKEN", "t")
    package = compile_pipeline(tmp_path / "p.yaml", None, [], image=None)
    write_demo_data(tmp_path / "data", days=2, rows_per_day=50)
    config_file = tmp_path / "c.yaml"
    config_file.write_text("train:\n  max_steps: 50\n")
    with FakeKfpServer(token="t") as server:
        deploy.deploy(deploy.connect(server.url), str(package), version_name="v1")
        assert main(["watch", "--data", str(tmp_path / "data"), "--home", str(tmp_path / "home"), "--once", "--json",
                     "--host", server.url, "--config", str(config_file)]) == 0
        assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["action"] == "run"
        (run,) = server.state.runs.values()
        sent = Config.from_json(run["runtime_config"]["parameters"]["config_json"])
        assert sent.train.backend == "auto" and sent.train.max_steps == 50
        assert sent.kubernetes.env_from_secrets == CREDENTIALS
