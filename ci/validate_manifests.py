"""Validate Kubernetes manifests offline: required fields, unique names, custom resources against CRDs.

    python ci/validate_manifests.py --crds components/lib/kube/crd_schemas --scan manifests build/manifests/*.yaml

The positional files are rendered kustomize output; ``--scan`` folders are searched for plain manifests
(YAML files that are not kustomization files, patches or config inputs of a kustomization).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REQUIRED = ("apiVersion", "kind")


def load_crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict]:
    """(apiVersion, kind) -> openAPIV3Schema of every CRD (YAML, or JSON as vendored) under ``crd_dir``."""
    schemas = {}
    paths = sorted(p for p in crd_dir.rglob("*") if p.suffix in (".yaml", ".yml", ".json")) if crd_dir.is_dir() else []
    for path in paths:
        docs = [json.loads(path.read_text())] if path.suffix == ".json" else yaml.safe_load_all(path.read_text())
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            for version in spec.get("versions", []):
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema:
                    schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema
    return schemas


def _referenced_by_kustomizations(folder: Path) -> set[Path]:
    """Files a kustomization uses as patches or generator inputs (not standalone objects)."""
    used: set[Path] = set()
    for kfile in list(folder.rglob("kustomization.yaml")) + list(folder.rglob("kustomization.yml")):
        k = yaml.safe_load(kfile.read_text()) or {}
        entries = list(k.get("patchesStrategicMerge") or []) + list(k.get("components") or [])
        entries += [p.get("path") for p in k.get("patches") or [] if isinstance(p, dict) and p.get("path")]
        for gen in (k.get("configMapGenerator") or []) + (k.get("secretGenerator") or []):
            entries += [f.split("=", 1)[-1] for f in gen.get("files") or []]
        used |= {(kfile.parent / e).resolve() for e in entries if isinstance(e, str)}
    return used


def validate_docs(docs: list[tuple[str, dict]], schemas: dict) -> list[str]:
    """Problems of a set of objects that are applied together (one rendered kustomization)."""
    import jsonschema

    errors, seen = [], {}
    for where, doc in docs:
        missing = [f for f in REQUIRED if not doc.get(f)]
        name = (doc.get("metadata") or {}).get("name")
        if missing or not name:
            errors.append(f"{where}: missing {', '.join(missing + ([] if name else ['metadata.name']))}")
            continue
        key = (doc["apiVersion"].split("/")[0] if "/" in doc["apiVersion"] else "", doc["kind"],
               (doc.get("metadata") or {}).get("namespace"), name)
        if key in seen:
            errors.append(f"{where}: {doc['kind']}/{name} is defined twice (also in {seen[key]})")
        seen[key] = where
        schema = schemas.get((doc["apiVersion"], doc["kind"]))
        if schema is not None:
            for err in jsonschema.Draft7Validator(schema).iter_errors(doc):
                path = ".".join(str(p) for p in err.absolute_path)
                errors.append(f"{where}: {doc['kind']}/{name} does not match its CRD at '{path}': {err.message}")
        if doc["kind"] in ("Deployment", "StatefulSet", "Job", "CronJob", "DaemonSet"):
            errors += _check_pod_template(where, doc)
    return errors


def _check_pod_template(where: str, doc: dict) -> list[str]:
    spec = doc.get("spec") or {}
    if doc["kind"] == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    pod = ((spec.get("template") or {}).get("spec")) or {}
    containers = pod.get("containers") or []
    name = doc["metadata"]["name"]
    if not containers:
        return [f"{where}: {doc['kind']}/{name} has no containers"]
    return [
        f"{where}: {doc['kind']}/{name} container {c.get('name')!r} has no image"
        for c in containers
        if not c.get("image")
    ]


def is_ctpipe_config(doc: dict) -> bool:
    """A ctpipe config file kept beside the manifests (sections such as train, registry; no kind)."""
    sections = {"data", "validation", "sanity", "model", "train", "select", "evaluate", "registry", "kubernetes", "watch"}
    return "kind" not in doc and "apiVersion" not in doc and bool(doc) and set(doc) <= sections


def check_ctpipe_config(path: Path) -> list[str]:
    """Load a ctpipe config with the project's own validation (skipped when the project is not installed)."""
    try:
        from ctpipe.components.lib.errors import ConfigError
        from ctpipe.components.run_config import load_config
    except ImportError:
        print(f"note: {path} is a ctpipe config; install the project to validate it", file=sys.stderr)
        return []
    try:
        load_config(path)
    except ConfigError as err:
        return [f"{path}: invalid ctpipe config: {err}"]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--crds", type=Path, default=Path("components/lib/kube/crd_schemas"))
    parser.add_argument("--scan", type=Path, action="append", default=[], help="folder of plain manifests")
    parser.add_argument("rendered", nargs="*", type=Path, help="rendered kustomize output")
    args = parser.parse_args(argv)
    folders = args.scan
    schemas = load_crd_schemas(args.crds)
    errors: list[str] = []
    count = 0
    for path in args.rendered:
        docs = [(str(path), d) for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        count += len(docs)
        errors += validate_docs(docs, schemas)
    for folder in folders:
        skip = _referenced_by_kustomizations(folder)
        for path in sorted(folder.rglob("*.y*ml")):
            if path.name.startswith("kustomization.") or path.resolve() in skip:
                continue
            try:
                docs = [(str(path), d) for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
            except yaml.YAMLError as err:
                errors.append(f"{path}: not valid YAML: {err}")
                continue
            configs = [d for _, d in docs if is_ctpipe_config(d)]
            if configs:
                errors += check_ctpipe_config(path)
                docs = [(w, d) for w, d in docs if not is_ctpipe_config(d)]
            count += len(docs)
            errors += validate_docs(docs, schemas)
    for line in errors:
        print(f"error: {line}", file=sys.stderr)
    print(f"validated {count} objects ({len(schemas)} CRD schemas known): {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
