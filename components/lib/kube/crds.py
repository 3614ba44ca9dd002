"""The Kubeflow CRD schemas generated jobs are validated against, read from the installed package.

The files in ``crd_schemas/`` are upstream CRDs, trimmed (``ci/vendor_crds.py``; tag, commit and sha256 in
``crd_schemas/PROVENANCE.md``). They travel inside the wheel and the images, so validation works wherever
ctpipe is installed.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

from ctpipe.components.lib.errors import UserError

PACKAGE_DIR = "crd_schemas"
PYTORCHJOB_CRD = "kubeflow.org_pytorchjobs.json"
TRAINJOB_CRD = "trainer.kubeflow.org_trainjobs.json"
# Every Trainer release a generated TrainJob must pass: the oldest supported, the one ctpipe builds against,
# and the next one in development (master at a pinned commit; crd_schemas/PROVENANCE.md).
TRAINJOB_CRDS = {
    "v2.2.1": "trainer.kubeflow.org_trainjobs.v2.2.1.json",
    "v2.3.0": TRAINJOB_CRD,
    "master": "trainer.kubeflow.org_trainjobs.master.json",
}
INFERENCESERVICE_CRD = "serving.kserve.io_inferenceservices.json"
# The Kubeflow Spark Operator 2.5's SparkApplication (the validate step with validation.engine=spark on a cluster).
SPARKAPPLICATION_CRD = "sparkoperator.k8s.io_sparkapplications.json"
# Katib v0.19's Experiment, with the schema of Katib's Go types (its CRD has none: crd_schemas/PROVENANCE.md).
EXPERIMENT_CRD = "kubeflow.org_experiments.json"


def crd_file(filename: str) -> Traversable:
    """Where the installed package keeps the vendored CRD ``filename``."""
    return resources.files("ctpipe.components.lib.kube").joinpath(PACKAGE_DIR, filename)


@functools.lru_cache(maxsize=8)
def load_crd(filename: str) -> dict[str, Any]:
    path = crd_file(filename)
    if not path.is_file():
        raise UserError(
            f"the vendored CRD '{filename}' is missing from the installed ctpipe package (looked in '{path}'); "
            "strict validation of generated jobs needs it. Reinstall ctpipe from a complete wheel or checkout "
            "(the files live in components/lib/kube/crd_schemas/)."
        )
    return json.loads(path.read_text())


def crd_schema(filename: str, version: str) -> dict[str, Any]:
    """The ``openAPIV3Schema`` of one served version of the CRD in ``filename``."""
    crd = load_crd(filename)
    for served in crd["spec"]["versions"]:
        if served["name"] == version:
            return served["schema"]["openAPIV3Schema"]
    names = [v["name"] for v in crd["spec"]["versions"]]
    raise UserError(f"CRD {filename} has no version {version!r}; it serves {names}")
