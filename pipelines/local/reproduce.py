"""Rebuild a registered version from its lineage, on this machine, and say whether it came out bit-identical.

    plan = plan_reproduction(registry, "3", data_uri=None)    # refuses (exit 2) before any work: data, code, platform
    result = run_reproduction(plan, out_dir)                   # snapshot, sanity gate, training, export, test metrics
    record_reproduction(registry, result)                      # the version's one REPRODUCTION_TAG, overwritten

A runner, as ``ctpipe train`` is: the steps' plain functions with the local launcher, the recorded config and
seeds, into a scratch folder; nothing is registered, no alias moves, no MLflow run is created. What it compares:
the SHA-256 of the weights (``state_dict_sha256``: names, dtypes, shapes, bytes; the export file's own digest
also covers paths and timings), and the test metrics the version was registered with. Bit-identical results need
the same torch, CUDA and cuDNN, device, CPU vector unit and world size (PyTorch's reproducibility note):
``components/lib/platform_facts.py`` names what the trainer recorded.
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.engine.checkpoint_index import read_index
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.files import list_data_files, partition_of
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.platform_facts import BEFORE_START, differences, platform_facts
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.steps.evaluate.scoring import score_batches
from ctpipe.components.steps.register.reproduction import (
    Comparison,
    compare_exports,
    export_weights,
    record_on_version,
    registered_weights,
)
from ctpipe.components.steps.sanity_checks.gate import run_sanity_checks
from ctpipe.components.steps.select_checkpoint.select import select_and_export
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.local import LocalLauncher
from ctpipe.pipelines.local.train_alone import build_snapshot


class ReproductionRefused(UserError):
    """What a reproduction needs does not hold (other data, other task code, another platform): nothing was run."""


@dataclass
class Plan:
    """A version whose data, task code and platform were checked: what ``run_reproduction`` rebuilds."""

    version: str
    config: Config
    data_uri: str
    lineage: dict[str, Any]
    tags: dict[str, str]
    model_version: Any  # the MLflow ModelVersion: its run holds the registered export
    tracking_uri: str
    platform_differences: list[str] = field(default_factory=list)  # allowed with --allow-platform-drift


@dataclass
class Reproduction(Comparison):
    """The outcome: the comparison of the two exports (``identical`` when the weights' digests and every test metric
    are equal), and how the rebuild went."""

    version: str
    platform_differences: list[str]
    sanity: str
    out_dir: str | None
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_reproduction(registry: Registry, version: str, *, data_uri: str | None = None,
                      allow_platform_drift: bool = False) -> Plan:
    """Read the version's lineage and check the data, the task code and the platform; ReproductionRefused naming
    what differs (before anything runs)."""
    mv = registry.get_version(version)
    tags, lineage = dict(mv.tags or {}), registry.lineage(mv)
    where = f"version {mv.version} of '{registry.name}'"
    config, data, drift = check_reproducible(where, lineage, tags, data_uri, allow_platform_drift=allow_platform_drift)
    return Plan(str(mv.version), config, data, lineage, tags, mv, registry.uri, drift)


def recorded_run(registry: Registry, version: str, *, data_uri: str | None = None) -> tuple[str, Config, str, str]:
    """What a cluster reproduction run is started with (``ctpipe models reproduce VERSION --host``): the version's
    number, its recorded config, the data URI and the recorded data fingerprint, which the run's first step checks
    the data against (the cluster reads the data and runs the task code, so those checks are the pipeline's)."""
    mv = registry.get_version(version)
    tags, lineage = dict(mv.tags or {}), registry.lineage(mv)
    where = f"version {mv.version} of '{registry.name}'"
    fingerprint, data = tags.get("ctpipe.data_fingerprint") or "", data_uri or str(lineage.get("data_uri") or "")
    missing = [name for name, value in (("config", lineage.get("config")), ("data fingerprint", fingerprint),
                                        ("data URI", data)) if not value]
    if missing:
        raise ReproductionRefused(f"{where} cannot be reproduced on the cluster: it records no {', '.join(missing)}"
                                  + (" (pass the training data with --data URI)" if missing == ["data URI"] else ""))
    try:
        config = Config.from_json(json.dumps(lineage["config"]))
    except ValueError as err:
        raise ReproductionRefused(f"{where}: its recorded config does not load with this ctpipe: {err}") from err
    return str(mv.version), config, data, fingerprint


def check_reproducible(where: str, lineage: dict[str, Any], tags: dict[str, str], data_uri: str | None, *,
                       allow_platform_drift: bool = False) -> tuple[Config, str, list[str]]:
    """The recorded config, the data URI to read and the platform differences allowed, after checking the data,
    the task code and the platform against ``lineage``; ReproductionRefused naming what differs."""
    missing = [name for name in ("config", "data_files", "platform", "task_code") if not lineage.get(name)]
    if missing:
        raise ReproductionRefused(
            f"{where} cannot be reproduced: its lineage does not record {', '.join(missing)} (it was registered by "
            "a ctpipe that did not record them). Versions registered from now on can be.")
    try:
        config = Config.from_json(json.dumps(lineage["config"]))
    except ValueError as err:
        raise ReproductionRefused(f"{where}: its recorded config does not load with this ctpipe: {err}") from err
    data = data_uri or str(lineage.get("data_uri") or "")
    _check_data(where, data, lineage["data_files"], tags.get("ctpipe.data_fingerprint"))
    _check_task_code(where, config, lineage["task_code"])
    drift = differences(lineage["platform"], _platform_here(config, lineage["platform"]), BEFORE_START)
    if drift and not allow_platform_drift:
        raise ReproductionRefused(
            f"{where} was trained on another platform, so its weights cannot be rebuilt bit for bit here: "
            f"{'; '.join(drift)}. Run where those match, or pass --allow-platform-drift to rebuild it anyway and "
            "measure how far it lands.")
    return config, data, drift


def _platform_here(config: Config, recorded: dict[str, Any]) -> dict[str, Any]:
    """The facts a reproduction here would record: this torch, the local launcher's world size and device."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    return platform_facts(device_type=device, world_size=config.train.workers, dtype=str(recorded.get("dtype")),
                          threads=config.train.threads_per_worker)


def _check_data(where: str, data_uri: str, recorded: list[dict[str, Any]], fingerprint: str | None) -> None:
    """ReproductionRefused naming each partition whose files were changed, removed or added since training."""
    if not data_uri:
        raise ReproductionRefused(f"{where} records no data URI; pass the training data with --data URI")
    try:
        current = {f.path: (f.size, f.sha256) for f in list_data_files(data_uri)}
    except (FileNotFoundError, UserError) as err:
        raise ReproductionRefused(f"{where}: its training data cannot be read at '{data_uri}': {err}. "
                                  "Pass where the same files are now with --data URI.") from err
    before = {f["path"]: (f["size"], f["sha256"]) for f in recorded}
    changed = sorted({partition_of(p) for p in before.keys() & current.keys() if before[p] != current[p]})
    removed = sorted({partition_of(p) for p in before.keys() - current.keys()})
    added = sorted({partition_of(p) for p in current.keys() - before.keys()})
    if changed or removed or added:
        parts = [f"{label}: {', '.join(names)}" for label, names in
                 (("changed", changed), ("missing", removed), ("added", added)) if names]
        raise ReproductionRefused(
            f"the data at '{data_uri}' is not the data {where} was trained on (fingerprint "
            f"{(fingerprint or '?')[:12]}); partitions {'; '.join(parts)}. Point --data at a copy of the data as it "
            "was (the lineage's data_files lists each file's size and SHA-256).")


def _check_task_code(where: str, config: Config, recorded: dict[str, Any]) -> None:
    """ReproductionRefused naming the task's module when its code is not the code the version was trained with."""
    from ctpipe.components.tasks import task_record
    from ctpipe.components.tasks.code_identity import COMPARED, task_code_identity

    current = task_code_identity(task_record(config.task))
    changed = [f"{k}: recorded {recorded.get(k)!r}, installed {current.get(k)!r}" for k in COMPARED
               if recorded.get(k) != current.get(k)]
    if changed:
        raise ReproductionRefused(
            f"{where} was trained with other code of its task: module '{recorded.get('source')}' "
            f"({'; '.join(changed)}). Install the task code it was trained with ({recorded.get('distribution')} "
            f"{recorded.get('version')}, source digest {str(recorded.get('source_sha256'))[:12]}) and run again.")


def run_reproduction(plan: Plan, out_dir: str | Path | None = None) -> Reproduction:
    """Snapshot, sanity gate, training and export with the recorded config and seeds into ``out_dir`` (a scratch
    folder removed afterwards when None), then the comparison with the registered export."""
    started = time.perf_counter()
    if out_dir is None:
        with tempfile.TemporaryDirectory(prefix="ctpipe-reproduce-") as tmp:
            return _run(plan, Path(tmp), started, keep=False)
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out '{out}' is not empty: a reproduction starts from nothing (training would resume "
                        "from checkpoints there). Pass a new or empty folder.")
    return _run(plan, out, started, keep=True)


def _run(plan: Plan, out: Path, started: float, *, keep: bool) -> Reproduction:
    out.mkdir(parents=True, exist_ok=True)
    config = plan.config
    snapshot = build_snapshot(plan.data_uri, config, out / "snapshot")
    recorded_fp = plan.tags.get("ctpipe.data_fingerprint")
    if recorded_fp and snapshot.fingerprint != recorded_fp:
        raise ReproductionRefused(f"the snapshot's fingerprint {snapshot.fingerprint[:12]} is not the recorded "
                                  f"{recorded_fp[:12]}: the data changed while it was read")
    sanity = run_sanity_checks(str(snapshot.root), config, report_path=str(out / "sanity.md"),
                               first_batch_path=str(out / "first_batch.json"), tracking_uri="", mlflow_run_id="",
                               summary_path=str(out / "sanity.json"))
    checkpoints = out / "checkpoints"
    train_model(str(snapshot.root), str(checkpoints), config, tracking_uri=None, mlflow_run_id=None,
                job_name=f"ctpipe-reproduce-v{plan.version}", launcher=LocalLauncher())
    select_and_export(str(checkpoints), str(snapshot.root), config, str(out / "model.pt"))
    comparison = compare_exports(_registered_weights(plan, out), export_weights(out / "model.pt"),
                                 plan.lineage.get("metrics") or {}, _test_metrics(out / "model.pt", snapshot))
    trained_on = read_index(checkpoints).get("platform") or {}
    return Reproduction(
        **vars(comparison),
        version=plan.version,
        platform_differences=differences(plan.lineage["platform"], trained_on),
        sanity="skipped" if sanity.skipped else ("passed" if sanity.passed else "failed"),
        out_dir=str(out) if keep else None,
        seconds=round(time.perf_counter() - started, 1),
    )


def _test_metrics(model_path: Path, snapshot: Any) -> dict[str, float]:
    """The export's metrics on the snapshot's test split, scored as evaluation scores a candidate."""
    from ctpipe.components.tasks.export import load_model_export

    model = load_model_export(model_path)
    scored = score_batches(snapshot.batches("test"), candidate=model, reference=model.state, slices=[],
                           schema=snapshot.schema)
    return {k: float(v) for k, v in model.task.scoring.compute_metrics(scored.targets, scored.candidate).items()}


def _registered_weights(plan: Plan, out: Path) -> dict[str, Any]:
    """The registered export's weights, checked against the version's ``ctpipe.model_sha256``."""
    try:
        return registered_weights(plan.tracking_uri, plan.model_version, out / "registered")
    except UserError as err:
        raise ReproductionRefused(str(err)) from err


def record_reproduction(registry: Registry, result: Reproduction) -> dict[str, Any]:
    """Overwrite the version's REPRODUCTION_TAG with this result (one short tag, bounded: only the latest)."""
    drift = f", platform drift allowed: {'; '.join(result.platform_differences)}" if result.platform_differences else ""
    return record_on_version(registry, result.version, result, f"by `ctpipe models reproduce` (the local launcher){drift}")
