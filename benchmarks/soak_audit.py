"""The soak's consistency audit: runs per data version, the registry's versions and champion, checkpoints.

Called by ``benchmarks/soak.py`` once its rounds are over; each audit returns the figures of its part of
the soak's JSON line, read from what the runs left behind (the ledger, run folders, the registry).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

MODEL = "ctpipe-classifier"
ARTIFACTS = ["ctpipe/model.pt", "model/MLmodel", "reference/reference_stats.json", "reports/blessing.json"]


def run_dirs(home: Path) -> dict[int, Path]:
    """The local runs' folders by the pid of their ``ctpipe submit`` process (``runs/<stamp>-<pid>``)."""
    return {int(p.name.rsplit("-", 1)[1]): p for p in (home / "runs").glob("*-*") if p.is_dir()}


def run_span(folder: Path) -> tuple[float | None, float]:
    """When a run's first step started (from its step records) and the last write under its folder."""
    starts = []
    for path in (folder / "steps").glob("*.json"):
        try:
            starts.append(float(json.loads(path.read_text())["started"]))
        except (OSError, ValueError, KeyError):
            pass
    last = max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=folder.stat().st_mtime)
    return (min(starts) if starts else None), last


def audit_runs(home: Path, records: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs per data version from the ledger, checked against the run folders on disk."""
    folders = run_dirs(home)
    known = {int(a["pid"]): r["fingerprint"] for r in records for a in r.get("attempts") or [] if a.get("pid")}
    unknown = sorted(str(folders[pid]) for pid in folders if pid not in known)  # a run nobody recorded
    overlaps, extra_successes = [], 0
    for record in records:
        attempts = [a for a in record.get("attempts") or [] if a.get("pid") in folders]
        spans = [run_span(folders[a["pid"]]) for a in attempts]
        for (_, end), (start, _) in zip(spans, spans[1:], strict=False):
            if start is not None and end > start:
                overlaps.append(record["fingerprint"][:12])
        extra_successes += max(0, sum(a.get("status") == "succeeded" for a in record.get("attempts") or []) - 1)
    return {
        "runs_started_per_version": dict(sorted(Counter(len(r.get("attempts") or []) for r in records).items())),
        "run_folders": len(folders),
        "runs_not_in_ledger": unknown,
        "overlapping_attempts": overlaps,
        "duplicate_runs": len(unknown) + len(overlaps) + extra_successes,
    }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def full_champion_history(uri: str, model: str) -> list[dict[str, Any]]:
    """Every champion move, oldest first: the pages of older entries, then the tag's newest ones."""
    from ctpipe.components.lib.config import RegistryConfig
    from ctpipe.components.lib.registry.registry import Registry

    registry = Registry(uri, RegistryConfig(model_name=model))
    pages = registry.champion_history_pages(max_pages=100_000)
    return [e for page in reversed(pages) for e in page] + registry.champion_history()


def audit_registry(uri: str) -> dict[str, Any]:
    """Every model version complete (lineage tags, artifacts, model hash); the champion history consistent."""
    import mlflow

    from ctpipe.components.lib.tracking.lineage import LINEAGE_FIELDS, version_lineage
    from ctpipe.components.steps.register.version_record import VERSION_TAGS  # what registration guarantees

    client = mlflow.MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = sorted(client.search_model_versions(f"name = '{MODEL}'", max_results=10000), key=lambda v: int(v.version))
    problems: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in versions:
            tags, missing = v.tags or {}, []
            # Every tag is set in the call that creates the version; the rest of the lineage is its digest-checked
            # artifact, where only compared_with is empty (first model).
            missing += [f"tag {t}" for t in VERSION_TAGS if not tags.get(t)]
            try:
                lineage = version_lineage(client, v)
                missing += [f"lineage {f}" for f in LINEAGE_FIELDS
                            if lineage.get(f) in (None, "") and f != "compared_with"]
            except Exception as err:  # a lineage that cannot be read or does not match its digest is a problem
                missing.append(f"lineage unreadable: {type(err).__name__}: {err}"[:300])
            if tags.get("ctpipe.registration") != "complete":
                missing.append("ctpipe.registration != complete")
            try:
                present = {a.path for d in ("ctpipe", "model", "reference", "reports") for a in client.list_artifacts(v.run_id, d)}
                missing += [f"artifact {a}" for a in ARTIFACTS if a not in present]
                model = Path(
                    mlflow.artifacts.download_artifacts(
                        run_id=v.run_id, artifact_path="ctpipe/model.pt", dst_path=f"{tmp}/{v.version}", tracking_uri=uri
                    )
                )
                if sha256_of(model) != tags.get("ctpipe.model_sha256"):
                    missing.append("ctpipe/model.pt does not match ctpipe.model_sha256")
            except Exception as err:  # an artifact that cannot be listed or read is a problem to report
                missing.append(f"artifacts unreadable: {type(err).__name__}: {err}"[:200])
            if missing:
                problems[str(v.version)] = missing
    model = client.get_registered_model(MODEL) if versions else None
    aliases = {k: str(x) for k, x in ((model.aliases or {}) if model else {}).items()}
    history = full_champion_history(uri, MODEL) if model else []
    by_number = {str(v.version): v for v in versions}
    violations = []
    previous = None
    for entry in history:
        version = by_number.get(str(entry["version"]))
        if version is None or (version.tags or {}).get("ctpipe.blessed") != "true":
            violations.append(f"champion moved to version {entry['version']}, which is not a blessed version")
        if str(entry.get("previous")) != str(previous):
            violations.append(f"move to {entry['version']} replaced {entry.get('previous')}, but the champion was {previous}")
        previous = entry["version"]
    if aliases.get("champion") != (str(previous) if previous is not None else None):
        violations.append(f"alias champion is {aliases.get('champion')}, the history ends at {previous}")
    promoted = {str(v.version) for v in versions if (v.tags or {}).get("ctpipe.promotion")}
    violations += [f"version {n} is tagged promoted but not in the history" for n in sorted(promoted - {str(e["version"]) for e in history})]
    locks = [m.name for m in client.search_registered_models() if m.name.endswith("--promotion-lock")]
    return {
        "model_versions": len(versions),
        "inconsistent_registry_entries": len(problems),
        "registry_problems": problems,
        "versions_without_promotion_decision": sorted(
            str(v.version) for v in versions if not (v.tags or {}).get("ctpipe.promotion_decision")
        ),  # created by an attempt killed before it judged the champion; complete, never aliased by it
        "champion": aliases.get("champion"),
        "champion_history": [str(e["version"]) for e in history],
        "champion_violations": violations,
        "promotion_locks_left": locks,
        "fingerprints": {(v.tags or {}).get("ctpipe.data_fingerprint") for v in versions},
    }


def audit_checkpoints(home: Path) -> dict[str, Any]:
    """Every complete checkpoint matches its digests and loads (its model part through the allowlisting reader,
    finite tensors)."""
    import torch

    from ctpipe.components.engine import checkpointing as ckpt

    complete = partial = 0
    unreadable = []
    roots = sorted({p.parent for p in (home / "pipeline_root").glob("*/train/checkpoints/step_*")})
    for root in roots:
        latest = ckpt.latest_complete(root)
        for step_dir in ckpt.checkpoint_dirs(root):
            if not ckpt.is_complete(step_dir):
                partial += 1  # a save that died before its marker: never read, by design
                if latest == step_dir:
                    unreadable.append(f"{step_dir}: incomplete but taken as the latest")
                continue
            try:
                model = ckpt.read_model_state(step_dir)  # never plain pickle: see checkpointing._SafeReader
                tensors = [t for t in model.values() if isinstance(t, torch.Tensor)]
                assert tensors and all(bool(torch.isfinite(t).all()) for t in tensors), "non-finite weights"
                ckpt.read_meta(step_dir)
                for rank_file in step_dir.glob("rank*.pt"):
                    torch.load(rank_file, map_location="cpu", weights_only=True)
                damage = ckpt.checkpoint_damage(step_dir)  # bytes that load but are not the ones saved
                assert damage is None, f"its files disagree with the digests saved with them ({damage})"
                complete += 1
            except Exception as err:  # reported, and counted against the goal
                unreadable.append(f"{step_dir}: {type(err).__name__}: {err}"[:300])
        if (root / ckpt.INDEX_FILE).exists():
            try:
                ckpt.read_index(root)
            except Exception as err:
                unreadable.append(f"{root / ckpt.INDEX_FILE}: {type(err).__name__}: {err}"[:300])
    return {"checkpoint_roots": len(roots), "complete_loaded": complete, "partial_ignored": partial, "unreadable": unreadable}
