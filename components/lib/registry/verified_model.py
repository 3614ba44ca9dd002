"""Load a registered model only after its files match the digest the registry recorded for them.

    local = download_verified("models:/ctpipe-classifier@champion", "champion", tracking_uri=uri)
    model = mlflow.pyfunc.load_model(str(local))      # or: load_verified(...), `ctpipe serve`

``mlflow.pyfunc.load_model`` on a ``models:/`` URI imports the code the model ships and runs its loader:
whoever can write the artifact store can rewrite those files. The version's tag ``ctpipe.pyfunc_sha256``
(written in the call that created the version, in the registry, which artifact-store writers cannot write)
is the digest of the model's manifest, which lists every file with its SHA-256; this module downloads the
version's files and checks them all before anything in them is imported or unpickled.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.registry.model_files import (
    PYFUNC_DIGEST_TAG,
    UntrustedModelError,
    verify_model_dir,
)
from ctpipe.components.lib.registry.tags import SERVABLE_TAG
from ctpipe.components.lib.tracking.lineage import version_lineage


def resolve_version(model_uri: str, *, tracking_uri: str) -> tuple[str, str]:
    """The (name, version) ``model_uri`` names now (``models:/NAME@ALIAS`` resolved once): serving then downloads
    ``models:/NAME/VERSION``, so the version it logs with its predictions is the one it serves."""
    import mlflow
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.utils.models import get_model_name_and_version

    if not model_uri.startswith("models:/"):
        raise UserError(f"model URI {model_uri!r}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        name, version = get_model_name_and_version(client, model_uri)
    except MlflowException as err:
        raise UserError(f"model URI {model_uri!r} does not name a registered version on {tracking_uri}: "
                        f"{err.message}") from err
    return name, str(version)


def download_verified(model_uri: str, dst: str | Path, *, tracking_uri: str, allow_unservable: bool = False) -> Path:
    """Download the version ``model_uri`` names (``models:/NAME@ALIAS`` or ``models:/NAME/VERSION``) into ``dst``
    and verify every file against its registry digest; ``dst`` is then the model folder (``MLmodel`` at its top)."""
    import mlflow
    import mlflow.artifacts
    from mlflow.exceptions import MlflowException
    from mlflow.store.artifact.utils.models import get_model_name_and_version

    if not model_uri.startswith("models:/"):
        raise UserError(f"model URI {model_uri!r}: expected models:/NAME@ALIAS or models:/NAME/VERSION (a registered "
                        "version, whose digest the registry holds)")
    client = mlflow.MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    try:
        name, version = get_model_name_and_version(client, model_uri)
        registered = client.get_model_version(name, version)
    except MlflowException as err:
        raise UserError(f"model URI {model_uri!r} does not name a registered version on {tracking_uri}: "
                        f"{err.message}") from err
    tags = registered.tags or {}
    digest = tags.get(PYFUNC_DIGEST_TAG)
    if not digest:
        raise UntrustedModelError(f"{name} version {version} has no '{PYFUNC_DIGEST_TAG}' tag (registered by an older "
                                  "ctpipe): its files cannot be verified; re-register it")
    if tags.get(SERVABLE_TAG) == "false" and not allow_unservable:
        why = version_lineage(client, registered).get("serving_check", "")
        raise UserError(f"{name} version {version} is marked not servable: {why}")
    target = Path(dst)
    if target.exists() and any(target.iterdir()):
        raise UserError(f"'{target}' is not empty: download a model into a new folder, so that no other file "
                        "mixes with the model's")
    # Downloaded and verified beside the target, then renamed into place: a refused model leaves nothing there.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=registered.source, dst_path=str(staging),
                                                         tracking_uri=tracking_uri))
        # MLflow's own registered_model_meta (a plain models:/ load wrote it into the stored folder) is
        # tolerated when it names this version; anything else added or changed is refused.
        verify_model_dir(local, digest, registered_as=(name, str(version)))
        if target.exists():
            target.rmdir()  # empty, checked above
        local.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def load_verified(model_uri: str, dst: str | Path, *, tracking_uri: str):
    """``mlflow.pyfunc.load_model`` of the verified download of ``model_uri`` (see ``download_verified``)."""
    import mlflow.pyfunc

    return mlflow.pyfunc.load_model(str(download_verified(model_uri, dst, tracking_uri=tracking_uri)))
