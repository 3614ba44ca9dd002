"""The CRD schemas ship inside the package (trimmed upstream files with their provenance), and nothing in the
project reads the reference folder that sits beside a development checkout."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from ctpipe.components.lib.kube import crds
from ctpipe.components.lib.kube.schema import validate_strict
from tests.fixtures.paths import REPO_ROOT as ROOT

VENDORED = ROOT / "components" / "lib" / "kube" / "crd_schemas"
# Spelled in two pieces so this file does not match its own search.
FORBIDDEN = re.compile(re.escape("../" + "shared") + "|" + re.escape("shared" + "/crds"))
SCANNED = ["components", "pipelines", "tests", "ci", ".ci", ".github", "manifests", "containers", "benchmarks"]


def _provenance_rows() -> dict[str, dict[str, str]]:
    rows = {}
    for line in (VENDORED / "PROVENANCE.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and cells[0].endswith(".json"):
            keys = ("file", "repository", "path", "tag", "commit", "upstream_sha256", "vendored_sha256")
            rows[cells[0]] = dict(zip(keys, cells, strict=True))
    return rows


def test_schemas_are_read_from_the_installed_package():
    for filename, version in ((crds.PYTORCHJOB_CRD, "v1"), (crds.TRAINJOB_CRD, "v1alpha1")):
        location = Path(str(crds.crd_file(filename)))
        assert location.parent == Path(crds.__file__).parent / "crd_schemas", location
        schema = crds.crd_schema(filename, version)
        assert schema["type"] == "object" and "spec" in schema["properties"]


def test_every_vendored_file_matches_its_provenance_record():
    rows = _provenance_rows()
    assert set(rows) == {p.name for p in VENDORED.glob("*.json")} == {crds.PYTORCHJOB_CRD, *crds.TRAINJOB_CRDS.values(),
                                                                      crds.INFERENCESERVICE_CRD, crds.SPARKAPPLICATION_CRD,
                                                                      crds.EXPERIMENT_CRD}
    for name, row in rows.items():
        text = (VENDORED / name).read_bytes()
        assert hashlib.sha256(text).hexdigest() == row["vendored_sha256"], f"{name} was changed by hand"
        annotations = json.loads(text)["metadata"]["annotations"]
        assert annotations["ctpipe.io/upstream-sha256"] == row["upstream_sha256"]
        # A release tag, or master for the next release in development (pinned by its commit below).
        assert annotations["ctpipe.io/upstream-tag"] == row["tag"] and re.fullmatch(r"v\d+\.\d+\.\d+|master", row["tag"])
        assert annotations["ctpipe.io/upstream"].endswith(f"/{row['commit']}/{row['path']}")
        assert re.fullmatch(r"[0-9a-f]{40}", row["commit"])


def test_trainjobs_are_checked_against_every_supported_trainer_release():
    """Trainer v2.2.1 (the oldest supported), v2.3.0 (the one ctpipe builds against) and master (v2.4 in
    development): a field one of them lacks is refused, naming the release."""
    from ctpipe.components.lib.kube.trainjob import JobValidationError, validate_trainjob

    assert list(crds.TRAINJOB_CRDS) == ["v2.2.1", "v2.3.0", "master"]
    for release, filename in crds.TRAINJOB_CRDS.items():
        annotations = crds.load_crd(filename)["metadata"]["annotations"]
        assert annotations["ctpipe.io/upstream-tag"] == release
        crds.crd_schema(filename, "v1alpha1")
    job = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
           "metadata": {"name": "ctpipe-train-a", "namespace": "team-a"},
           "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"image": "i", "numNodes": 1}}}
    validate_trainjob(job)
    job["spec"]["trainer"]["numProcPerNode"] = "auto"
    with pytest.raises(JobValidationError) as err:
        validate_trainjob(job)
    assert "spec.trainer.numProcPerNode" in str(err.value)
    assert "v2.2.1" in str(err.value) and "master" in str(err.value)


def test_trimming_kept_what_strict_validation_needs():
    """The trimmed schema still rejects a misplaced field and a wrong type (what the descriptions never did)."""
    schema = crds.crd_schema(crds.PYTORCHJOB_CRD, "v1")
    assert "description" not in json.dumps(schema).replace('"description":{', "")
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "a"},
           "spec": {"pytorchReplicaSpecs": {}, "ttlSecondsAfterFinished": 5, "runPolicy": {"backoffLimit": "x"}}}
    problems = validate_strict(job, schema)
    assert any("spec.ttlSecondsAfterFinished: unknown field" in p for p in problems)
    assert any("spec.runPolicy.backoffLimit: expected integer" in p for p in problems)


def test_a_missing_vendored_file_fails_clearly(monkeypatch):
    monkeypatch.setattr(crds, "PACKAGE_DIR", "no-such-dir")
    crds.load_crd.cache_clear()
    try:
        with pytest.raises(crds.UserError, match="Reinstall ctpipe"):
            crds.crd_schema(crds.PYTORCHJOB_CRD, "v1")
    finally:
        crds.load_crd.cache_clear()


def test_nothing_in_the_project_reads_the_reference_folder_beside_the_checkout():
    offenders = []
    paths = [p for d in SCANNED if (ROOT / d).is_dir() for p in (ROOT / d).rglob("*")]
    paths += [p for p in ROOT.iterdir() if p.is_file()]
    for path in paths:
        if not path.is_file() or "__pycache__" in path.parts or path.suffix in (".pyc", ".db", ".parquet"):
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        offenders += [f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1)
                      if FORBIDDEN.search(line)]
    assert not offenders, f"references to the development-only reference folder: {offenders}"
