"""A registered model's files are data until checked: a rewritten export, a task record naming other code, or
rewritten shipped code is refused before anything in it runs (the trust model: docs/use-the-model.md)."""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import mlflow.pyfunc
import pytest
import torch
import yaml

from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.registry.model_files import (
    MANIFEST_FILE,
    UntrustedModelError,
    own_package,
    shipped_sources,
    stage_code,
    verify_model_dir,
)
from ctpipe.components.lib.registry.verified_model import download_verified
from ctpipe.components.lib.tracking import use_tracking
from ctpipe.components.steps.register.model_artifacts import build_pyfunc_model
from ctpipe.components.steps.register.pyfunc_model import EXPORT_DIGEST
from ctpipe.components.tasks.trusted_code import UntrustedTaskError, check_served_task
from tests.fixtures.champion import champion  # noqa: F401  (the session fixture)
from tests.fixtures.registry import make_model, make_snapshot


@pytest.fixture(scope="module")
def pyfunc_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trust")
    snapshot_dir = make_snapshot(root, rows_per_day=150)
    model = make_model(snapshot_dir, root / "model.pt")
    return build_pyfunc_model(model, load_snapshot(snapshot_dir), root / "pyfunc")


def _copy(pyfunc_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(pyfunc_dir, tmp_path / "model"))


def _export_naming_os_system(model_dir: Path, marker: Path) -> Path:
    """Rewrite the pyfunc's own export as a well-formed weights-only file whose task record runs a command."""
    export = model_dir / "artifacts" / "model.pt"
    payload = torch.load(export, map_location="cpu", weights_only=True)
    payload["task"] = {"name": "x", "entrypoint": "os:system", "options": {"command": f"touch {marker}"}}
    torch.save(payload, export)
    return export


def test_a_rewritten_export_is_refused_before_it_is_read(pyfunc_dir, tmp_path):
    # Before: the pyfunc loader never checked the export's digest; this rewritten export made load_model run
    # `touch` (os.system) with write access to the artifact store alone.
    model_dir, marker = _copy(pyfunc_dir, tmp_path), tmp_path / "ran"
    _export_naming_os_system(model_dir, marker)
    with pytest.raises(UntrustedModelError, match=r"model\.pt' has SHA-256 .* but registration recorded"):
        mlflow.pyfunc.load_model(str(model_dir))
    assert not marker.exists()


def test_a_task_record_naming_os_system_is_refused_even_with_a_matching_digest(pyfunc_dir, tmp_path):
    # A writer who rewrites the MLmodel's digest as well still cannot make the loader import code the model does
    # not ship: only the built-in tasks and the shipped task package are imported.
    model_dir, marker = _copy(pyfunc_dir, tmp_path), tmp_path / "ran"
    export = _export_naming_os_system(model_dir, marker)
    mlmodel = model_dir / "MLmodel"
    spec = yaml.safe_load(mlmodel.read_text())
    spec["flavors"]["python_function"]["config"][EXPORT_DIGEST] = hashlib.sha256(export.read_bytes()).hexdigest()
    mlmodel.write_text(yaml.safe_dump(spec))
    with pytest.raises(UntrustedTaskError, match=r"task.entrypoint 'os:system' is not code the model ships"):
        mlflow.pyfunc.load_model(str(model_dir))
    assert not marker.exists()


def test_a_model_without_a_recorded_export_digest_is_refused(pyfunc_dir, tmp_path):
    model_dir = _copy(pyfunc_dir, tmp_path)
    mlmodel = model_dir / "MLmodel"
    spec = yaml.safe_load(mlmodel.read_text())
    del spec["flavors"]["python_function"]["config"][EXPORT_DIGEST]
    mlmodel.write_text(yaml.safe_dump(spec))
    with pytest.raises(UntrustedModelError, match=f"no '{EXPORT_DIGEST}'"):
        mlflow.pyfunc.load_model(str(model_dir))


def test_ctpipe_modules_other_than_the_built_in_tasks_are_not_task_code(tmp_path):
    record = {"name": "x", "entrypoint": f"{own_package()}.processes:exit_without_teardown", "options": {}}
    with pytest.raises(UntrustedTaskError, match="names ctpipe code that is not a task"):
        check_served_task(record, tmp_path)
    check_served_task({"name": "tabular_classification", "entrypoint": None, "options": {}}, tmp_path)


def test_a_user_task_is_accepted_only_from_the_models_code_folder(tmp_path, monkeypatch):
    shipped, elsewhere = tmp_path / "code", tmp_path / "site"
    for folder in (shipped, elsewhere):
        (folder / "my_task").mkdir(parents=True)
        (folder / "my_task" / "__init__.py").write_text("def make_task():\n    raise AssertionError('imported')\n")
    record = {"name": "mine", "entrypoint": "my_task:make_task", "options": {}}
    monkeypatch.syspath_prepend(str(elsewhere))
    with pytest.raises(UntrustedTaskError, match=f"would be imported from '{elsewhere / 'my_task'}'"):
        check_served_task(record, shipped)
    monkeypatch.syspath_prepend(str(shipped))  # the model's code first, as MLflow puts it
    check_served_task(record, shipped)
    assert "my_task" not in sys.modules  # checked without importing it


def test_the_shipped_code_is_ctpipe_and_the_user_task_package_found_from_the_modules(tmp_path, monkeypatch):
    (tmp_path / "churn_task").mkdir()
    (tmp_path / "churn_task" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    import ctpipe.components.tasks.export as export_module

    ours = Path(sys.modules[own_package()].__file__).parent
    assert shipped_sources({"entrypoint": None}) == [ours]
    assert shipped_sources({"entrypoint": "churn_task.task:make"}) == [ours, tmp_path / "churn_task"]
    # Staged, the package is whole (a source checkout maps components/ and pipelines/ in from beside it).
    staged = stage_code(shipped_sources({"entrypoint": None}), tmp_path / "code")
    relative = Path(export_module.__file__).relative_to(Path(sys.modules["ctpipe.components"].__file__).parent)
    assert (staged[0] / "components" / relative).is_file()


def test_the_built_model_ships_its_code_and_lists_every_file_in_its_manifest(pyfunc_dir):
    code = pyfunc_dir / "code" / own_package()
    assert (code / "components" / "steps" / "register" / "pyfunc_model.py").is_file()
    assert (code / "components" / "tasks" / "tabular.py").is_file()
    assert not list(code.rglob("__pycache__"))
    requirements = (pyfunc_dir / "requirements.txt").read_text().split()
    assert all("==" in line for line in requirements if not line.startswith("-"))
    assert {r.split("==")[0] for r in requirements} >= {"mlflow", "torch", "pandas", "numpy"}
    digest = hashlib.sha256((pyfunc_dir / MANIFEST_FILE).read_bytes()).hexdigest()
    verify_model_dir(pyfunc_dir, digest)


def test_shipped_code_rewritten_in_the_artifact_store_is_refused_before_anything_is_imported(
        champion, tmp_path):  # noqa: F811
    # The pyfunc's own loader is shipped code: only a digest held outside the artifact store (the registry's
    # ctpipe.pyfunc_sha256) can catch a rewrite of it. download_verified checks every file before any import.
    client = mlflow.MlflowClient(champion.tracking_uri, registry_uri=champion.tracking_uri)
    version = client.get_model_version_by_alias(champion.model_name, "champion")
    stored = Path(mlflow.artifacts.download_artifacts(artifact_uri=version.source, dst_path=str(tmp_path / "peek"),
                                                      tracking_uri=champion.tracking_uri))
    assert stored.is_dir()
    in_store = Path(version.source.removeprefix("file://")) / "code" / own_package() / "components" / "steps" / "register" / "pyfunc_model.py"
    original, marker = in_store.read_bytes(), tmp_path / "ran"
    try:
        in_store.write_bytes(original + f"\nimport pathlib; pathlib.Path({str(marker)!r}).touch()\n".encode())
        with pytest.raises(UntrustedModelError, match=r"changed: code/.*/register/pyfunc_model\.py"):
            download_verified(champion.uri, tmp_path / "download", tracking_uri=champion.tracking_uri)
        assert not marker.exists() and not (tmp_path / "download").exists()  # a refused model leaves nothing
    finally:
        in_store.write_bytes(original)
    verified = download_verified(champion.uri, tmp_path / "again", tracking_uri=champion.tracking_uri)
    assert (verified / "MLmodel").is_file()


def test_a_plain_mlflow_load_leaves_the_champion_on_the_verified_path_and_nothing_else_is_tolerated(
        champion, tmp_path):  # noqa: F811
    # Issue 46: `mlflow.pyfunc.load_model("models:/…")` (or `mlflow models serve -m models:/…@champion`) on a local
    # artifact store writes MLflow's registered_model_meta into the stored model folder; after that the verified
    # loader refused the champion ("added: registered_model_meta") until someone deleted the file by hand.
    client = mlflow.MlflowClient(champion.tracking_uri, registry_uri=champion.tracking_uri)
    version = client.get_model_version_by_alias(champion.model_name, "champion")
    stored = Path(version.source.removeprefix("file://"))
    meta = stored / "registered_model_meta"
    try:
        use_tracking(champion.tracking_uri)  # models:/ URIs resolve through the registry URI
        mlflow.pyfunc.load_model(champion.uri)  # the plain load, exactly as MLflow 3.17.2 does it
        assert meta.is_file()  # what MLflow itself wrote, at the model's top level
        written = yaml.safe_load(meta.read_text())
        assert set(written) == {"model_name", "model_version"} and written["model_name"] == champion.model_name
        assert str(written["model_version"]) == str(version.version)  # an int from SQLite, a string over HTTP
        verified = download_verified(champion.uri, tmp_path / "after-plain-load", tracking_uri=champion.tracking_uri)
        assert (verified / "MLmodel").is_file()
        # Only MLflow's own record of this very model and version: naming another version is a change.
        original = meta.read_text()
        meta.write_text(yaml.safe_dump({"model_name": champion.model_name, "model_version": "99"}))
        with pytest.raises(UntrustedModelError, match=r"registered_model_meta.*names .* version 99"):
            download_verified(champion.uri, tmp_path / "other-version", tracking_uri=champion.tracking_uri)
        meta.write_text(original + "extra: field\n")
        with pytest.raises(UntrustedModelError, match="registered_model_meta"):
            download_verified(champion.uri, tmp_path / "extra-field", tracking_uri=champion.tracking_uri)
        meta.write_text(original)
        # The same name anywhere but the model's top level, or any other added file, is still refused.
        (stored / "code" / "registered_model_meta").write_text(original)
        with pytest.raises(UntrustedModelError, match=r"added: code/registered_model_meta"):
            download_verified(champion.uri, tmp_path / "nested", tracking_uri=champion.tracking_uri)
    finally:
        meta.unlink(missing_ok=True)
        (stored / "code" / "registered_model_meta").unlink(missing_ok=True)


def test_the_manifest_check_tolerates_mlflows_record_only_for_the_named_version(pyfunc_dir, tmp_path):
    model_dir = _copy(pyfunc_dir, tmp_path)
    digest = hashlib.sha256((model_dir / MANIFEST_FILE).read_bytes()).hexdigest()
    (model_dir / "registered_model_meta").write_text("model_name: churn\nmodel_version: '3'\n")
    verify_model_dir(model_dir, digest, registered_as=("churn", "3"))
    with pytest.raises(UntrustedModelError, match="added: registered_model_meta"):
        verify_model_dir(model_dir, digest)  # no registered version to compare it with: a file added
    with pytest.raises(UntrustedModelError, match="names model 'churn' version 3, not 'other' version 3"):
        verify_model_dir(model_dir, digest, registered_as=("other", "3"))
    (model_dir / "registered_model_meta").write_text("!!python/object:os.system {}\n")
    with pytest.raises(UntrustedModelError, match="registered_model_meta"):
        verify_model_dir(model_dir, digest, registered_as=("churn", "3"))
