"""Where the upstream CRDs live and how to read their OpenAPI schemas."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import yaml

from components.errors import UserError

CRDS_DIR_ENV = "CTPIPE_CRDS_DIR"
PYTORCHJOB_CRD = "kubeflow.org_pytorchjobs.yaml"
TRAINJOB_CRD = "trainer.kubeflow.org_trainjobs.yaml"


def crds_dir() -> Path:
    """The CRD folder: ``$CTPIPE_CRDS_DIR``, else ``../shared/crds`` beside the repository root."""
    override = os.environ.get(CRDS_DIR_ENV)
    if override:
        path = Path(override)
    else:
        # components/kube/crds.py -> repository root is two levels above the package folder.
        repo_root = Path(__file__).resolve().parents[2]
        path = repo_root.parent / "shared" / "crds"
    if not (path / PYTORCHJOB_CRD).is_file():
        raise UserError(
            f"the Kubeflow CRDs were not found in '{path}' (looked for {PYTORCHJOB_CRD}); strict validation "
            f"of generated jobs needs them. Put the upstream CRD files (see PROVENANCE.md) in ../shared/crds "
            f"beside the repository, or point {CRDS_DIR_ENV} at the folder that holds them."
        )
    return path


@functools.lru_cache(maxsize=8)
def _load_crd(path: str) -> dict[str, Any]:
    with open(path) as handle:
        return yaml.safe_load(handle)


def crd_schema(filename: str, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one served version of the CRD in ``filename``."""
    crd = _load_crd(str(crds_dir() / filename))
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    names = [v["name"] for v in crd["spec"]["versions"]]
    raise UserError(f"CRD {filename} has no version {version!r}; it serves {names}")
