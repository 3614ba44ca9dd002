"""Vendor upstream Kubeflow and KServe CRDs into the package: the schemas ctpipe validates generated jobs against.

    python ci/vendor_crds.py kubeflow/trainer=/path/to/trainer kserve/kserve=/path/to/kserve \
        kubeflow/spark-operator=/path/to/spark-operator kubeflow/katib=/path/to/katib         # git clones; by hand

Not run by CI. Reads each upstream CustomResourceDefinition named in ``UPSTREAM`` at its pinned commit from
a git clone of its repository (``git show COMMIT:PATH``: several releases of one file side by side),
checks its sha256 against the pinned one, drops the ``description`` texts (about 60 % of the
bytes; validation never reads them), records where each came from in the CRD's own annotations, and
writes it as JSON under ``components/lib/kube/crd_schemas/`` with a ``PROVENANCE.md`` beside. Update the
pins below first when upgrading.

Katib serves its Experiment CRD without a structural schema (``x-kubernetes-preserve-unknown-fields``: its
admission webhook decodes the Go types). For it the schema is Katib's own OpenAPI of those types
(``OPENAPI_SCHEMAS``: ``api/openapi-spec/swagger.json`` at the same commit, sha256 pinned), resolved into one
self-contained ``openAPIV3Schema``, so that strict validation knows every field Katib knows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

TARGET = Path(__file__).resolve().parents[1] / "components" / "lib" / "kube" / "crd_schemas"
TRAINER = "kubeflow/trainer"
# vendored file -> (repository, upstream path, tag, commit, sha256 of the upstream file). TrainJob: the release ctpipe
# builds against (v2.3.0) under the plain name, plus the oldest supported release and the development line of
# the next one (master, v2.4 in development: no v2.4 tag upstream yet), which generated TrainJobs must also pass.
_TRAINJOBS = "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml"
UPSTREAM = {
    "kubeflow.org_pytorchjobs.json": (
        TRAINER,
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        "v1.9.4",
        "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7",
        "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed",
    ),
    "trainer.kubeflow.org_trainjobs.json": (
        TRAINER,
        _TRAINJOBS,
        "v2.3.0",
        "658725bdae5c7e3a0854d93ac6ff492e109a22ab",
        "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416",
    ),
    "trainer.kubeflow.org_trainjobs.v2.2.1.json": (
        TRAINER,
        _TRAINJOBS,
        "v2.2.1",
        "c505fc7ccec98bb326cee56144bc5ee92be5048d",
        "4e0ef90484ed1bbb60e4b6eb43a1bfffe033fd92e3d22504e0317324ce965c29",
    ),
    "trainer.kubeflow.org_trainjobs.master.json": (
        TRAINER,
        _TRAINJOBS,
        "master",
        "8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3",
        "b04c5e3f7480ea3b38e9b557cf4f5817be19dceb2f52ae580397184f9f95468f",
    ),
    # The champion's hand-off (manifests/components/kserve): KServe v0.20, what the Kubeflow distribution installs.
    "serving.kserve.io_inferenceservices.json": (
        "kserve/kserve",
        "config/crd/full/serving.kserve.io_inferenceservices.yaml",
        "v0.20.0",
        "1fb781055dd1567164358233e1125142ca6ef1fe",
        "57c3bf13f77de94678bf2ae3748056ec071ad2b9e88d6a28f44fb4710758fcff",
    ),
    # The validate step's SparkApplication (validation.engine=spark on a cluster): the Kubeflow Spark Operator 2.5,
    # the release line the Kubeflow distribution installs; v2.5.2 is its latest patch (same CRD as v2.5.0).
    "sparkoperator.k8s.io_sparkapplications.json": (
        "kubeflow/spark-operator",
        "charts/spark-operator-chart/crds/sparkoperator.k8s.io_sparkapplications.yaml",
        "v2.5.2",
        "43afb8bbd32463037d8fb6e414e252c69081882b",
        "ecd9c14fcadb9d5f8ced4c4ee31920548ea53a892e0a69c3e43aa758bfca6d94",
    ),
    # Katib's Experiment (kubeflow.org/v1beta1): the HPO engine a tune step hands its trials to when installed.
    "kubeflow.org_experiments.json": (
        "kubeflow/katib",
        "manifests/v1beta1/components/crd/experiment.yaml",
        "v0.19.0",
        "578e60f1ce83dbb5e7151026a3bdc4de233947fc",
        "c7f8a989368dcc87bcbb2739efa3b3e6f78d31f156857e0284e56c8bd6bf98db",
    ),
}
# vendored file -> (upstream OpenAPI document at the same commit, its sha256, the root type): the schema of a CRD
# that upstream serves without one.
OPENAPI_SCHEMAS = {
    "kubeflow.org_experiments.json": (
        "api/openapi-spec/swagger.json",
        "0bfcfec03e1d857001ab7e8ee88d2e861252c4291ae70d92413c910af3e71263",
        "v1beta1.Experiment",
    ),
}
# Kubernetes types an OpenAPI document refers to by name, as a structural schema has them.
_OPENAPI_LEAVES = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
    "io.k8s.apimachinery.pkg.apis.meta.v1.unstructured.Unstructured": {"type": "object",
                                                                         "x-kubernetes-preserve-unknown-fields": True},
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": {"type": "string", "format": "date-time"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"x-kubernetes-int-or-string": True},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"x-kubernetes-int-or-string": True},
}


def openapi_schema(document: dict[str, Any], root: str) -> dict[str, Any]:
    """The schema of ``root`` in an OpenAPI 3 document with every ``$ref`` (and one-element ``allOf``) resolved,
    without descriptions and defaults (validation reads neither)."""
    schemas = document["components"]["schemas"]

    def resolve(node: Any, trail: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [resolve(v, trail) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref") or (node["allOf"][0].get("$ref") if len(node.get("allOf") or []) == 1 else None)
        if ref:
            name = ref.rsplit("/", 1)[-1]
            if name in _OPENAPI_LEAVES:
                return dict(_OPENAPI_LEAVES[name])
            if name in trail:  # a recursive type: its inner level is left open
                return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
            return resolve(schemas[name], (*trail, name))
        out = {k: resolve(v, trail) for k, v in node.items() if k not in ("description", "default")}
        if out.get("additionalProperties") is True and "properties" not in out:
            out = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return out

    return resolve(schemas[root], (root,))


def strip_descriptions(node: Any) -> Any:
    """The schema without its ``description`` texts (a property *named* description is a mapping, and kept)."""
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def vendor(clones: dict[str, Path]) -> list[tuple[str, str, str, str, str, str, str]]:
    rows = []
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, (repository, path, tag, commit, sha256) in UPSTREAM.items():
        if repository not in clones:
            sys.exit(f"no clone of {repository} given (REPOSITORY=PATH)")
        raw = subprocess.run(["git", "-C", str(clones[repository]), "show", f"{commit}:{path}"], check=True,
                             capture_output=True).stdout
        actual = hashlib.sha256(raw).hexdigest()
        if actual != sha256:
            sys.exit(f"{commit}:{path}: sha256 {actual} is not the pinned {sha256}; update UPSTREAM for a new release")
        crd = strip_descriptions(yaml.safe_load(raw))
        if name in OPENAPI_SCHEMAS:
            crd = with_openapi_schema(crd, clones[repository], commit, repository, OPENAPI_SCHEMAS[name])
        crd["metadata"].setdefault("annotations", {}).update({
            "ctpipe.io/upstream": f"https://github.com/{repository}/blob/{commit}/{path}",
            "ctpipe.io/upstream-tag": tag,
            "ctpipe.io/upstream-sha256": sha256,
            "ctpipe.io/trimmed": "description texts removed",
        })
        text = json.dumps(crd, sort_keys=True, separators=(",", ":")) + "\n"
        out = TARGET / name
        out.write_text(text)
        rows.append((out.name, repository, path, tag, commit, sha256, hashlib.sha256(text.encode()).hexdigest()))
    return rows


def with_openapi_schema(crd: dict[str, Any], clone: Path, commit: str, repository: str,
                        source: tuple[str, str, str]) -> dict[str, Any]:
    """``crd`` with the schema of its (only) version taken from upstream's OpenAPI document ``source``."""
    path, sha256, root = source
    raw = subprocess.run(["git", "-C", str(clone), "show", f"{commit}:{path}"], check=True, capture_output=True).stdout
    actual = hashlib.sha256(raw).hexdigest()
    if actual != sha256:
        sys.exit(f"{commit}:{path}: sha256 {actual} is not the pinned {sha256}; update OPENAPI_SCHEMAS")
    (version,) = crd["spec"]["versions"]
    version["schema"] = {"openAPIV3Schema": openapi_schema(json.loads(raw), root)}
    crd["metadata"].setdefault("annotations", {}).update({
        "ctpipe.io/schema-from": f"https://github.com/{repository}/blob/{commit}/{path}#{root}",
        "ctpipe.io/schema-from-sha256": sha256,
    })
    return crd


def write_provenance(rows: list[tuple[str, str, str, str, str, str, str]]) -> None:
    lines = [
        "# Provenance of the vendored CRD schemas",
        "",
        "Upstream Kubernetes CustomResourceDefinitions of Kubeflow's training jobs, the Spark Operator's SparkApplication",
        "and KServe's InferenceService, trimmed and kept in the package so that every install (wheel, images, a fork's",
        "CI) validates generated jobs and the serving manifests strictly against them. Written by",
        "`python ci/vendor_crds.py kubeflow/trainer=CLONE kserve/kserve=CLONE kubeflow/spark-operator=CLONE",
        "kubeflow/katib=CLONE`; do not edit by hand",
        "(`tests/components/lib/kube/test_crds_vendored.py` checks the hashes below).",
        "",
        "Trimming: every `description` text is removed and the CRD is stored as JSON with sorted keys; nothing",
        "that validation reads (types, properties, required, enums, patterns, formats, ranges, list types,",
        "`x-kubernetes-*` markers, CEL rules) is changed. The upstream location is also recorded in each",
        "file's `metadata.annotations` (`ctpipe.io/upstream*`).",
        "",
        "| file | repository | upstream path | tag | commit | upstream sha256 | vendored sha256 |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, repository, path, tag, commit, upstream_sha, vendored_sha in rows:
        lines.append(f"| {name} | {repository} | {path} | {tag} | {commit} | {upstream_sha} | {vendored_sha} |")
    lines += [
        "",
        "PyTorchJob (`kubeflow.org/v1`) is the Training Operator v1 API, kept upstream on the release-1.9 branch;",
        "TrainJob (`trainer.kubeflow.org/v1alpha1`) is Kubeflow Trainer v2's successor: generated TrainJobs are",
        "validated against v2.3.0 (the release ctpipe builds against), v2.2.1 (the oldest supported) and master at",
        "the pinned commit (v2.4 in development; upstream has no v2.4 tag yet). Name rules (a DNS-1035 label of at",
        "most 63 characters, CEL rules on `metadata.name`) are the same in all three.",
        "InferenceService (`serving.kserve.io/v1beta1`) is KServe v0.20's, the release the Kubeflow distribution",
        "installs; the champion's predictor (`manifests/components/kserve/`) is validated against it.",
        "SparkApplication (`sparkoperator.k8s.io/v1beta2`) is the Kubeflow Spark Operator's, release v2.5.2 (the CRD",
        "file is byte-identical in v2.5.0, v2.5.1 and v2.5.2); the validate step's application",
        "(`validation.engine: spark` on a cluster) is validated against it.",
        "Experiment (`kubeflow.org/v1beta1`) is Katib v0.19.0's, where a tune step hands its trials to Katib. Katib",
        "serves the CRD without a structural schema (`x-kubernetes-preserve-unknown-fields`: its webhook decodes the",
        "Go types), so the vendored file's `openAPIV3Schema` is Katib's own OpenAPI of those types",
        "(`api/openapi-spec/swagger.json` at the same commit, sha256 in the file's `ctpipe.io/schema-from-sha256`),",
        "resolved into one schema; the webhook's rules are `components/lib/kube/katib.py`'s, and the trial template",
        "(a TrainJob) is validated against the TrainJob CRDs above.",
        "",
        "What the schemas do not say (and `components/lib/kube/` checks itself):",
        "- They do not forbid unknown fields: a field at the wrong level (`spec.ttlSecondsAfterFinished` instead of",
        "  `spec.runPolicy.ttlSecondsAfterFinished`) passes plain schema validation, while an API server with strict",
        "  field validation rejects it. ctpipe treats every object that lists `properties` as closed unless it says",
        "  `x-kubernetes-preserve-unknown-fields: true`.",
        "- The Training Operator's admission webhook adds rules: the job name is a DNS-1035 label; only Master and",
        "  Worker replica types; Master has exactly 1 replica; every container has an image and one is named",
        "  `pytorch`; elasticPolicy needs a Worker.",
        "- The Spark Operator's admission webhook (v2.5.2 `internal/webhook/sparkapplication_validator.go`,",
        "  `sparkconf_validator.go`) adds: the application name is a DNS-1035 label; pod templates need Spark >= 3.0;",
        "  a node selector on the application and on the driver/executor at once is refused; `sparkConf` must not set",
        "  the master, the images, the service accounts or credentials, and `spark.kubernetes.namespace` only to the",
        "  application's own namespace. The driver and executor `template`s are free-form in the CRD",
        "  (`x-kubernetes-preserve-unknown-fields`); ctpipe's tests validate them against the core Pod schema.",
        "",
    ]
    (TARGET / "PROVENANCE.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("clones", nargs="+", metavar="REPOSITORY=PATH",
                        help="a git clone of each repository in UPSTREAM holding the pinned commits")
    clones = dict(item.split("=", 1) for item in parser.parse_args().clones)
    write_provenance(vendor({repo: Path(path) for repo, path in clones.items()}))


if __name__ == "__main__":
    main()
