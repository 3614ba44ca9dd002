"""Vendor upstream Kubeflow CRDs into the package: the schemas ctpipe validates generated jobs against.

    python ci/vendor_crds.py /path/to/upstream/crds          # by hand, when moving to a new upstream release

Not run by CI. Reads the upstream CustomResourceDefinition files named in ``UPSTREAM`` from the given
folder, checks their sha256 against the pinned one, drops the ``description`` texts (about 60 % of the
bytes; validation never reads them), records where each came from in the CRD's own annotations, and
writes it as JSON under ``components/lib/kube/crd_schemas/`` with a ``PROVENANCE.md`` beside. Update the
pins below first when upgrading.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

TARGET = Path(__file__).resolve().parents[1] / "components" / "lib" / "kube" / "crd_schemas"
REPOSITORY = "kubeflow/trainer"
# upstream file -> (upstream path, tag, commit, sha256 of the upstream file)
UPSTREAM = {
    "kubeflow.org_pytorchjobs.yaml": (
        "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
        "v1.9.4",
        "4445c12aa62e4345b0c2c6ac9b215a70eca46ed7",
        "8b8a8a719cc94173169290251e817f7ac2bb425c20b6c2fa813397bcf4e932ed",
    ),
    "trainer.kubeflow.org_trainjobs.yaml": (
        "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
        "v2.3.0",
        "658725bdae5c7e3a0854d93ac6ff492e109a22ab",
        "a742cafc5b5582640c7e0b7467c024fc237256fbca5ba0a9f0531dfb66d64416",
    ),
}


def strip_descriptions(node: Any) -> Any:
    """The schema without its ``description`` texts (a property *named* description is a mapping, and kept)."""
    if isinstance(node, dict):
        return {k: strip_descriptions(v) for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [strip_descriptions(v) for v in node]
    return node


def vendored_name(upstream_name: str) -> str:
    return upstream_name.rsplit(".", 1)[0] + ".json"


def vendor(source: Path) -> list[tuple[str, str, str, str, str, str]]:
    rows = []
    TARGET.mkdir(parents=True, exist_ok=True)
    for name, (path, tag, commit, sha256) in UPSTREAM.items():
        raw = (source / name).read_bytes()
        actual = hashlib.sha256(raw).hexdigest()
        if actual != sha256:
            sys.exit(f"{source / name}: sha256 {actual} is not the pinned {sha256}; update UPSTREAM for a new release")
        crd = strip_descriptions(yaml.safe_load(raw))
        crd["metadata"].setdefault("annotations", {}).update({
            "ctpipe.io/upstream": f"https://github.com/{REPOSITORY}/blob/{commit}/{path}",
            "ctpipe.io/upstream-tag": tag,
            "ctpipe.io/upstream-sha256": sha256,
            "ctpipe.io/trimmed": "description texts removed",
        })
        text = json.dumps(crd, sort_keys=True, separators=(",", ":")) + "\n"
        out = TARGET / vendored_name(name)
        out.write_text(text)
        rows.append((out.name, path, tag, commit, sha256, hashlib.sha256(text.encode()).hexdigest()))
    return rows


def write_provenance(rows: list[tuple[str, str, str, str, str, str]]) -> None:
    lines = [
        "# Provenance of the vendored CRD schemas",
        "",
        "Upstream Kubernetes CustomResourceDefinitions of Kubeflow's training jobs, trimmed and kept in the",
        "package so that every install (wheel, images, a fork's CI) validates generated jobs strictly against",
        "them. Written by `python ci/vendor_crds.py UPSTREAM_DIR`; do not edit by hand",
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
    for name, path, tag, commit, upstream_sha, vendored_sha in rows:
        lines.append(f"| {name} | {REPOSITORY} | {path} | {tag} | {commit} | {upstream_sha} | {vendored_sha} |")
    lines += [
        "",
        "PyTorchJob (`kubeflow.org/v1`) is the Training Operator v1 API, kept upstream on the release-1.9 branch;",
        "TrainJob (`trainer.kubeflow.org/v1alpha1`) is Kubeflow Trainer v2's successor.",
        "",
        "What the schemas do not say (and `components/lib/kube/` checks itself):",
        "- They do not forbid unknown fields: a field at the wrong level (`spec.ttlSecondsAfterFinished` instead of",
        "  `spec.runPolicy.ttlSecondsAfterFinished`) passes plain schema validation, while an API server with strict",
        "  field validation rejects it. ctpipe treats every object that lists `properties` as closed unless it says",
        "  `x-kubernetes-preserve-unknown-fields: true`.",
        "- The Training Operator's admission webhook adds rules: the job name is a DNS-1035 label; only Master and",
        "  Worker replica types; Master has exactly 1 replica; every container has an image and one is named",
        "  `pytorch`; elasticPolicy needs a Worker.",
        "",
    ]
    (TARGET / "PROVENANCE.md").write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="folder holding the upstream CRD YAML files")
    write_provenance(vendor(parser.parse_args().source))


if __name__ == "__main__":
    main()
