"""What the registered pyfunc carries besides its export, and the manifest that lets a loader trust it.

    sources = shipped_sources(task_record)        # ctpipe's own package + the user's task package
    staged = stage_code(sources, tmp / "code")     # -> mlflow.pyfunc.save_model(code_paths=staged)
    digest = write_manifest(model_dir)             # -> the version's tag ctpipe.pyfunc_sha256
    verify_model_dir(downloaded, digest)           # before anything in it is imported or unpickled

The shipped packages are derived from the module objects (their ``__name__`` and ``__file__``), not from path
strings, so the list follows the package when it is renamed (``components`` -> ``ctpipe.components``): the
top-level package that holds this module is shipped whole, and so is the top-level package (or module) of a
user's ``task.entrypoint``. The manifest lists every file of the model directory with its SHA-256; its own
digest is recorded in the registry (a store that the artifact store's writers cannot write), so a loader
that holds that digest refuses any rewritten, added or removed file before it imports or unpickles one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.errors import UserError

MANIFEST_FILE = "ctpipe_manifest.json"
MANIFEST_FORMAT = "ctpipe.pyfunc-manifest/v1"
# The version tag holding the manifest's SHA-256 (set in the call that creates the version).
PYFUNC_DIGEST_TAG = "ctpipe.pyfunc_sha256"
# The version tag holding the SHA-256 of the run's export (``ctpipe/model.pt``), set in the same call: a reader of
# the export reads the downloaded file only when it has that digest (``verify_export``).
EXPORT_DIGEST_TAG = "ctpipe.model_sha256"
# What MLflow itself writes into a registered model's folder when it is loaded or served by ``models:/`` URI from a
# local artifact store (mlflow/store/artifact/models_artifact_repo.py, 3.17.2: ``_add_registered_model_meta_file``,
# a YAML mapping of exactly model_name and model_version, at the folder's top level, next to MLmodel).
MLFLOW_REGISTERED_META = "registered_model_meta"
# Build outputs a copied package may hold: never shipped (they differ per interpreter and are not sources).
_NOT_SHIPPED = ("__pycache__", "*.pyc", "*.pyo")


class UntrustedModelError(UserError):
    """A model's files do not match the digests recorded for them; the message names what did not match."""


def own_package() -> str:
    """The top-level import name of ctpipe's code (``components`` today, ``ctpipe`` after the rename)."""
    return __name__.split(".")[0]


def top_level_source(module_name: str) -> Path:
    """The folder of the top-level package holding ``module_name``, or the file of a top-level module.

    Found without importing the module (``find_spec`` of the top-level name only)."""
    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    spec = loaded.__spec__ if loaded is not None and loaded.__spec__ is not None else importlib.util.find_spec(top)
    if spec is None:
        raise UntrustedModelError(f"module '{top}' cannot be found, so it cannot be shipped with the model")
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin and spec.origin.endswith(".py"):
        return Path(spec.origin)
    raise UntrustedModelError(f"module '{top}' is not Python source ({spec.origin}); it cannot be shipped with a model")


def shipped_sources(task_record: dict[str, Any]) -> list[Path]:
    """The code the pyfunc imports: ctpipe's own package, plus the top-level package of a user's task."""
    sources = [top_level_source(own_package())]
    entrypoint = task_record.get("entrypoint")
    if entrypoint:
        user = top_level_source(entrypoint.partition(":")[0])
        if user not in sources:
            sources.append(user)
    return sources


def stage_code(sources: list[Path], out_dir: Path) -> list[Path]:
    """Copy each source (a package folder or a module file) into ``out_dir`` without build outputs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    staged = []
    for source in sources:
        target = out_dir / source.name
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))
            for part, folder in _parts_outside(source):  # a source checkout maps them in from other folders
                shutil.copytree(folder, target / part, ignore=shutil.ignore_patterns(*_NOT_SHIPPED))
        else:
            shutil.copy2(source, target)
        staged.append(target)
    return staged


def _parts_outside(package_dir: Path) -> list[tuple[str, Path]]:
    """ctpipe's subpackages that do not sit inside its folder (``components/``, ``pipelines/`` of a source
    checkout, mapped into ``ctpipe`` by setup.py; an installed wheel has them inside)."""
    if package_dir.name != own_package():
        return []
    import ctpipe

    parts = []
    for part in ctpipe.PARTS:
        spec = importlib.util.find_spec(f"{own_package()}.{part}")
        folder = Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None
        if folder is not None and not folder.is_relative_to(package_dir):
            parts.append((part, folder))
    return parts


def sha256_file(path: Path) -> str:
    """SHA-256 of a file's bytes, read in blocks (an export may be large)."""
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def verify_export(path: Path, tags: dict[str, str] | None, *, what: str, require_tag: bool) -> None:
    """UntrustedModelError unless the export file ``path`` (``what`` names it in the message) has the SHA-256 its
    version's ``EXPORT_DIGEST_TAG`` records. A version without the tag (registered before the tag existed) passes
    unless ``require_tag``; such an export is still only ever read with ``torch.load(weights_only=True)``."""
    expected = (tags or {}).get(EXPORT_DIGEST_TAG)
    if not expected:
        if require_tag:
            raise UntrustedModelError(f"{what} has no {EXPORT_DIGEST_TAG} tag on its version: it cannot be verified, "
                                      "so it is not loaded")
        return
    found = sha256_file(path)
    if found != expected:
        raise UntrustedModelError(
            f"{what} does not match its {EXPORT_DIGEST_TAG} tag (file SHA-256 {found[:12]}, registered "
            f"{expected[:12]}): replaced or changed in the artifact store after registration, so it is not loaded")


def file_digests(root: Path) -> dict[str, str]:
    """Relative POSIX path -> SHA-256 of every file under ``root`` except the manifest itself."""
    return {
        path.relative_to(root).as_posix(): sha256_file(path)
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.relative_to(root).as_posix() != MANIFEST_FILE
    }


def write_manifest(model_dir: Path) -> str:
    """Write the manifest of ``model_dir``'s files into it (whole, atomically) and return the manifest's SHA-256."""
    text = json.dumps({"format": MANIFEST_FORMAT, "files": file_digests(model_dir)}, indent=1, sort_keys=True)
    atomic_write_text(model_dir / MANIFEST_FILE, text)
    return hashlib.sha256(text.encode()).hexdigest()


def verify_model_dir(model_dir: Path, manifest_sha256: str, *, registered_as: tuple[str, str] | None = None) -> None:
    """UntrustedModelError unless ``model_dir`` holds exactly the files its manifest lists, with their digests,
    and the manifest is the one whose digest the registry recorded (``manifest_sha256``).

    ``registered_as`` (model name, version): the registered version this folder is; then, and only then, the
    one file MLflow writes into it on a plain ``models:/`` load is tolerated: ``registered_model_meta`` at the
    top level, naming exactly this model and version (``mlflow_registered_meta_ok``). Nothing is imported
    either way; any other added, changed or missing file is refused."""
    manifest = model_dir / MANIFEST_FILE
    if not manifest.is_file():
        raise UntrustedModelError(f"'{model_dir}' has no {MANIFEST_FILE}: it was not registered by this ctpipe, or "
                                  "it was altered; refusing to load it")
    actual = sha256_file(manifest)
    if actual != manifest_sha256:
        raise UntrustedModelError(
            f"'{manifest}' has SHA-256 {actual}, but the registry recorded {manifest_sha256} "
            f"({PYFUNC_DIGEST_TAG}): the model's files were rewritten after registration; refusing to load it")
    listed = json.loads(manifest.read_text())["files"]
    found = file_digests(model_dir)
    changed = sorted(name for name in listed.keys() & found.keys() if listed[name] != found[name])
    added, removed = sorted(found.keys() - listed.keys()), sorted(listed.keys() - found.keys())
    if MLFLOW_REGISTERED_META in added and registered_as is not None:
        check_mlflow_registered_meta(model_dir / MLFLOW_REGISTERED_META, *registered_as)
        added.remove(MLFLOW_REGISTERED_META)
    if changed or added or removed:
        parts = [f"{what}: {', '.join(names[:5])}{' …' if len(names) > 5 else ''}"
                 for what, names in (("changed", changed), ("added", added), ("missing", removed)) if names]
        raise UntrustedModelError(
            f"'{model_dir}' is not the model that was registered ({'; '.join(parts)}); refusing to load it")


def check_mlflow_registered_meta(path: Path, model_name: str, version: str) -> None:
    """UntrustedModelError unless ``path`` is MLflow's record of this very version: a YAML mapping of exactly
    ``model_name`` and ``model_version`` naming ``model_name`` and ``version`` (read with the safe loader: it
    holds data, never code)."""
    import yaml

    where = f"'{path}' (added after registration; MLflow writes it on a plain models:/ load)"
    try:
        meta = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise UntrustedModelError(f"{where} is not MLflow's record: {type(err).__name__}; refusing to load it") from None
    if not isinstance(meta, dict) or set(meta) != {"model_name", "model_version"}:
        keys = sorted(map(str, meta)) if isinstance(meta, dict) else type(meta).__name__
        raise UntrustedModelError(f"{where} holds {keys}, not exactly model_name and model_version as MLflow writes "
                                  "it; refusing to load it")
    named = (str(meta["model_name"]), str(meta["model_version"]))
    if named != (model_name, str(version)):
        raise UntrustedModelError(f"{where} names model '{named[0]}' version {named[1]}, not '{model_name}' version "
                                  f"{version}, the version being loaded; refusing to load it")
