"""A version's lineage record that fails its digest (issue 46): rollback refuses it as promote does, and a run that
reads a damaged champion's lineage fails as a registry error naming the version and the file, never as bad data
(which the watcher would blame on, and settle for, every new data version)."""

from __future__ import annotations

import json

import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG
from ctpipe.components.lib.tracking import local_tracking_uri
from ctpipe.components.lib.tracking.lineage import (
    LINEAGE_DIGEST_TAG,
    LINEAGE_PATH,
    LineageError,
    write_lineage,
)
from ctpipe.components.steps.validate_data.validate import validate_data
from tests.fixtures.corpus import KEY, write_clean


def _version(registry: Registry, tmp_path, n: int, suite: str | None = None) -> str:
    """A version as register leaves it: its run holds ctpipe/lineage.json (and the suite), its tags the digest."""
    client = registry.client
    experiment = client.get_experiment_by_name("ctpipe") or client.get_experiment(
        client.create_experiment("ctpipe", artifact_location=(tmp_path / "mlartifacts").as_uri()))
    run = client.create_run(experiment.experiment_id).info.run_id
    folder = tmp_path / f"v{n}" / "ctpipe"
    digest = write_lineage(folder / "lineage.json", {"pipeline_run_id": f"p{n}", "metrics": {"accuracy": 0.8}})
    client.log_artifact(run, str(folder / "lineage.json"), "ctpipe")
    if suite:
        (tmp_path / f"v{n}" / "reference").mkdir()
        (tmp_path / f"v{n}" / "reference" / "suite.json").write_text(suite)
        client.log_artifact(run, str(tmp_path / f"v{n}" / "reference" / "suite.json"), "reference")
    registry.ensure_registered_model()
    mv = client.create_model_version(registry.name, f"runs:/{run}/model", run_id=run,
                                     tags={LINEAGE_DIGEST_TAG: digest, COMPLETE_TAG: "complete", "ctpipe.blessed": "true"})
    return str(mv.version)


def _damage(registry: Registry, tmp_path, number: str) -> None:
    """Rewrite the version's lineage.json in the artifact store (its digest in the registry stays)."""
    run = registry.get_version(number).run_id
    folder = tmp_path / f"damaged{number}" / "ctpipe"
    write_lineage(folder / "lineage.json", {"pipeline_run_id": "forged", "metrics": {"accuracy": 0.99}})
    registry.client.log_artifact(run, str(folder / "lineage.json"), "ctpipe")


def test_rollback_to_a_version_whose_lineage_fails_its_digest_is_refused_as_promote_refuses_it(tmp_path):
    registry = Registry(local_tracking_uri(tmp_path), Config().registry)
    first, second = _version(registry, tmp_path, 1), _version(registry, tmp_path, 2)
    registry.promote_manual(first, reason="first", by="ops")
    registry.promote_manual(second, reason="better", by="ops")
    _damage(registry, tmp_path, first)
    with pytest.raises(LineageError, match=rf"version {first} of 'ctpipe-classifier'.*{LINEAGE_PATH}"):
        registry.promote_manual(first, reason="back", by="ops")
    # Before: rollback moved the champion to it all the same.
    with pytest.raises(LineageError, match=rf"version {first} of 'ctpipe-classifier'.*{LINEAGE_PATH}"):
        registry.rollback(reason="canary failed", by="ops")
    assert registry.alias_version("champion") == second and registry.champion_stack() == [first, second]


def test_a_damaged_champion_lineage_fails_validation_as_a_registry_error_naming_version_and_file(tmp_path):
    uri = local_tracking_uri(tmp_path)
    config = Config.from_dict({"data": {"key": KEY}})
    registry = Registry(uri, config.registry)
    suite = json.dumps({"name": "suite", "expectations": [], "meta": {}})
    number = _version(registry, tmp_path, 1, suite=suite)
    with registry.locked():
        registry.client.set_registered_model_alias(registry.name, "champion", number)
    _damage(registry, tmp_path, number)
    data = write_clean(tmp_path / "data")
    out = tmp_path / "out"
    with pytest.raises(Exception) as raised:  # noqa: PT011 - which exception is what the test is about
        validate_data(str(data), config, snapshot_dir=str(out / "snapshot"), data_docs_path=str(out / "docs.html"),
                      report_path=str(out / "report.md"), tracking_uri=uri, mlflow_run_id="")
    # Not the data's fault: not a UserError (exit 1, user_error false), so the watcher does not settle the version.
    assert not isinstance(raised.value, UserError), raised.value
    from ctpipe.components.lib.errors import RegistryRecordError

    assert isinstance(raised.value, RegistryRecordError)
    assert f"v{number}" in str(raised.value) and LINEAGE_PATH in str(raised.value)
