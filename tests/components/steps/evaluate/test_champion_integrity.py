"""A champion export that is not the file registered (its ctpipe.model_sha256 tag) is never loaded."""

from __future__ import annotations

import mlflow
import pytest

from ctpipe.components.lib.data.files import sha256_local
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.steps.evaluate.evaluate import load_champion
from tests.components.steps.evaluate.test_champion_task import make_champion
from tests.fixtures.registry import fast_config, make_model, make_snapshot


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    root = tmp_path_factory.mktemp("champion-integrity")
    return make_model(make_snapshot(root), root / "model.pt", steps=10, seed=0)


def register(tmp_path, model_file, tagged_sha: str) -> tuple[str, object]:
    config, uri = fast_config(), local_tracking_uri(tmp_path)
    version = make_champion(uri, config, model_file)
    mlflow.MlflowClient(uri, registry_uri=uri).set_model_version_tag(
        config.registry.model_name, version, "ctpipe.model_sha256", tagged_sha)
    return uri, config


def test_an_export_replaced_in_the_artifact_store_is_refused_before_it_is_read(tmp_path, model_file, monkeypatch):
    # The export in the artifact store was swapped after registration (the tag still names the original).
    uri, config = register(tmp_path, model_file, "0" * 64)
    loaded = []
    monkeypatch.setattr("ctpipe.components.steps.evaluate.evaluate.load_model_export", lambda path: loaded.append(path))
    score, model = load_champion(uri, config)
    assert model is None and loaded == []
    assert score.version == "1"
    assert "does not match its ctpipe.model_sha256 tag" in score.error
    assert sha256_local(model_file)[:12] in score.error and "000000000000" in score.error


def test_the_registered_export_is_loaded(tmp_path, model_file):
    uri, config = register(tmp_path, model_file, sha256_local(model_file))
    score, model = load_champion(uri, config)
    assert score.error is None and model is not None
    assert score.metadata and score.metadata == dict(model.metadata)
