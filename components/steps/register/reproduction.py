"""The register step of a run with trigger ``reproduce``: compare, record, never register.

    result = record_pipeline_reproduction(model_path, snapshot_dir, blessing_path, config, tracking_uri=..., ...)

``ctpipe models reproduce VERSION --host`` starts a pipeline run with the version's recorded config, data and data
fingerprint and the trigger ``reproduce``. Its candidate is the rebuilt model: this step finds the version it
rebuilds (the newest whose data fingerprint and recorded config are this run's), compares the weights' digests
and the test metrics with it, and writes the result on the version (``REPRODUCTION_TAG``, as the local command
does) and on this run's MLflow run. No version is created, no alias moves, no description changes.
The comparison itself (``compare_exports``) is the one ``pipelines/local/reproduce.py`` uses.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctpipe.components.engine.checkpointing import state_dict_sha256
from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.handoffs import read_blessing
from ctpipe.components.lib.registry.model_files import verify_export
from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import REPRODUCTION_TAG
from ctpipe.components.lib.tracking import bounded_mlflow_http
from ctpipe.components.lib.tracking.store import download_version_file

EXPORT_ARTIFACT = "ctpipe/model.pt"  # where registration logs the evaluated export (model_artifacts.py)
CARD_ARTIFACT = "reports/model_card.md"  # the version's model card on its run (register.py logs it decided)
CARD_SECTION = "## Reproduction"


class NothingToReproduce(UserError):
    """A reproduction run whose data and config no registered version records: nothing was registered."""


@dataclass
class Comparison:
    """Two exports compared: ``identical`` when the weights' digests and every recorded test metric are equal."""

    identical: bool
    registered_weights_sha256: str
    reproduced_weights_sha256: str
    max_param_diff: float
    max_param_name: str | None
    metrics: dict[str, dict[str, float]]
    max_metric_diff: float


def compare_exports(registered: dict[str, Any], reproduced: dict[str, Any], registered_metrics: dict[str, float],
                    reproduced_metrics: dict[str, float]) -> Comparison:
    """Weights (state dicts) and test metrics of a registered export and its rebuild."""
    metrics = compare_metrics(registered_metrics, reproduced_metrics)
    max_diff, max_name = largest_difference(registered, reproduced)
    digests = state_dict_sha256(registered), state_dict_sha256(reproduced)
    max_metric = max((m["difference"] for m in metrics.values()), default=0.0)
    return Comparison(digests[0] == digests[1] and max_metric == 0.0, digests[0], digests[1], max_diff, max_name,
                      metrics, max_metric)


def compare_metrics(registered: dict[str, float], reproduced: dict[str, float]) -> dict[str, dict[str, float]]:
    """Per metric recorded at registration: both values and their absolute difference (0 when both are NaN)."""
    out = {}
    for name in sorted(registered):
        a, b = float(registered[name]), float(reproduced.get(name, math.nan))
        same = a == b or (math.isnan(a) and math.isnan(b))
        out[name] = {"registered": a, "reproduced": b, "difference": 0.0 if same else abs(a - b)}
    return out


def largest_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[float, str | None]:
    """The largest absolute difference of any parameter or buffer, and its name (inf when names or shapes differ)."""
    if a.keys() != b.keys():
        return math.inf, ", ".join(sorted(a.keys() ^ b.keys())[:3])
    best, name = 0.0, None
    for key in sorted(a):
        x, y = a[key], b[key]
        if x.shape != y.shape:
            return math.inf, key
        diff = float((x.double() - y.double()).abs().max()) if x.numel() else 0.0
        if diff > best:
            best, name = diff, key
    return best, name


def reproduction_tag(comparison: Comparison) -> dict[str, Any]:
    """The version's REPRODUCTION_TAG record (``REPRODUCTION_FIELDS``): when, the result, the digests' prefix."""
    return {
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "result": "identical" if comparison.identical else "mismatch",
        "weights_sha256": comparison.reproduced_weights_sha256[:16],
        "max_param_diff": comparison.max_param_diff if math.isfinite(comparison.max_param_diff) else "inf",
        "max_metric_diff": comparison.max_metric_diff if math.isfinite(comparison.max_metric_diff) else "inf",
    }


def record_on_version(registry: Registry, version: str, comparison: Comparison, how: str) -> dict[str, Any]:
    """Overwrite the version's REPRODUCTION_TAG with this result (one short tag, bounded: only the latest), then its
    model card's Reproduction section (``how``: where it was rebuilt). A card that cannot be rewritten is said in
    the record's ``card_error``; the tag stands."""
    record = reproduction_tag(comparison)
    text = json.dumps(record, separators=(",", ":"))  # fixed fields: well under a tag's 250 characters
    registry.call(lambda: registry.client.set_model_version_tag(registry.name, version, REPRODUCTION_TAG, text),
                  f"record the reproduction of version {version}")
    try:
        _card_section(registry, registry.get_version(version), record, comparison, how)
    except Exception as err:  # after the tag (the record): the card is its readable copy
        return {**record, "card_error": f"the model card was not updated: {type(err).__name__}: {err}"}
    return record


def card_with_reproduction(card: str, record: dict[str, Any], comparison: Comparison, how: str) -> str:
    """``card`` with one Reproduction section at its end: this result in place of an earlier one."""
    head = card.split(f"\n{CARD_SECTION}\n")[0].rstrip("\n")
    verdict = ("bit-identical: the same weights (SHA-256), every test metric equal" if comparison.identical else
               f"NOT identical: largest parameter difference {comparison.max_param_diff:.3g} "
               f"({comparison.max_param_name}), largest test-metric difference {comparison.max_metric_diff:.3g}")
    return "\n".join([head, "", CARD_SECTION, "", f"- {record['at']}: {verdict}",
                      f"- rebuilt {how}; weights SHA-256 {comparison.reproduced_weights_sha256}",
                      "- only the latest reproduction is kept (`ctpipe models show`: `reproduction`)", ""])


def _card_section(registry: Registry, version, record: dict[str, Any], comparison: Comparison, how: str) -> None:
    with tempfile.TemporaryDirectory(prefix="ctpipe-card-") as tmp:
        card = registry.call(lambda: download_version_file(registry.uri, version, CARD_ARTIFACT, tmp),
                             "read the version's model card")
        if card is None:
            return  # registered without a card: the tag is the record
        updated = Path(tmp) / "updated" / Path(CARD_ARTIFACT).name
        updated.parent.mkdir()
        atomic_write_text(updated, card_with_reproduction(card.read_text(), record, comparison, how))
        registry.call(lambda: registry.client.log_artifact(version.run_id, str(updated),
                                                           Path(CARD_ARTIFACT).parent.name),
                      "log the model card with its reproduction")


def export_weights(path: Path) -> dict[str, Any]:
    """An export's state dict, read with ``weights_only`` (no code is imported)."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)["state_dict"]


def registered_weights(tracking_uri: str, version, where: Path) -> dict[str, Any]:
    """The registered export's weights, after its file's SHA-256 matches the version's ``EXPORT_DIGEST_TAG``."""
    local = download_version_file(tracking_uri, version, EXPORT_ARTIFACT, where)
    if local is None:
        raise UserError(f"version {version.version}: its run has no {EXPORT_ARTIFACT} to compare with")
    verify_export(local, version.tags, what=f"version {version.version}'s {EXPORT_ARTIFACT}", require_tag=False)
    return export_weights(local)


def reproduced_version(registry: Registry, fingerprint: str, config: Config):
    """The newest version trained on data ``fingerprint`` with ``config`` (its lineage's), else NothingToReproduce."""
    wanted = json.loads(config.to_json())
    for version in reversed(registry.versions()):
        if (version.tags or {}).get("ctpipe.data_fingerprint") == fingerprint:
            if registry.lineage(version).get("config") == wanted:
                return version
    raise NothingToReproduce(
        f"trigger 'reproduce': no version of '{registry.name}' was trained on data {fingerprint[:12]} with this "
        "run's config, so there is nothing to compare with; nothing was registered. Start reproductions with "
        "'ctpipe models reproduce VERSION --host URL', which sends the version's recorded config and data.")


def record_pipeline_reproduction(model_path: str, snapshot_dir: str, blessing_path: str, config: Config, *,
                                 tracking_uri: str, mlflow_run_id: str) -> tuple[str, Comparison, list[str], str]:
    """Compare the rebuilt ``model_path`` (scored by evaluation: the blessing's metrics) with the version it
    rebuilds and record the result on that version and on this run. Returns (version, comparison, its aliases, what
    was not written: '' or the card's error)."""
    blessing = read_blessing(blessing_path)
    snapshot = load_snapshot(snapshot_dir)
    with bounded_mlflow_http():
        registry = Registry(tracking_uri, config.registry)
        version = reproduced_version(registry, snapshot.fingerprint, config)
        number = str(version.version)
        with tempfile.TemporaryDirectory(prefix="ctpipe-reproduce-") as tmp:
            registered = registered_weights(registry.uri, version, Path(tmp))
        comparison = compare_exports(registered, export_weights(Path(model_path)),
                                     registry.lineage(version).get("metrics") or {}, blessing.candidate_metrics)
        record = record_on_version(registry, number, comparison, f"by pipeline run {mlflow_run_id} (MLflow run)")
        for key, value in (("ctpipe.reproduced_version", number), ("ctpipe.reproduction", record["result"])):
            registry.call(lambda k=key, v=value: registry.client.set_tag(mlflow_run_id, k, v),
                          f"tag MLflow run {mlflow_run_id}")
        aliases = sorted(alias for alias, v in registry.aliases().items() if v == number)
    return number, comparison, aliases, str(record.get("card_error") or "")
