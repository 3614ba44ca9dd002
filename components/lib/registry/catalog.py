"""Read-only views of the registered versions for the CLI: one plain dict per version."""

from __future__ import annotations

import time
from typing import Any

from ctpipe.components.lib.registry.registry import Registry
from ctpipe.components.lib.registry.tags import COMPLETE_TAG, KEY_TAG, promotion_record, reproduction_record
from ctpipe.components.lib.tracking.lineage import METRIC_TAG_PREFIX

METRIC_PREFIX = METRIC_TAG_PREFIX


def _blessed(tags: dict[str, str]) -> bool | None:
    value = tags.get("ctpipe.blessed")
    return None if value is None else value == "true"


def _run_of_key(key: str | None) -> str | None:
    """The pipeline run a registration key names (``PIPELINE_RUN/SHA256_PREFIX``, ``register.registration_key``)."""
    return key.rpartition("/")[0] or None if key else None


def version_record(mv, aliases_by_version: dict[str, list[str]]) -> dict[str, Any]:
    """The summary of one version that `ctpipe models list --json` prints, from its tags alone (one registry call
    for every version): its metrics are the headline one (every one on a version registered before the lineage
    artifact); ``show_version`` reads them all."""
    tags = dict(mv.tags or {})
    number = str(mv.version)
    return {
        "version": number,
        "aliases": sorted(aliases_by_version.get(number, [])),
        "blessed": _blessed(tags),
        "trigger": tags.get("ctpipe.trigger"),
        "data_fingerprint": tags.get("ctpipe.data_fingerprint"),
        "metrics": {
            k[len(METRIC_PREFIX) :]: float(v) for k, v in sorted(tags.items()) if k.startswith(METRIC_PREFIX)
        },
        "pipeline_run_id": tags.get("ctpipe.pipeline_run_id") or _run_of_key(tags.get(KEY_TAG)),
        "run_id": mv.run_id,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((mv.creation_timestamp or 0) / 1000)),
        "promotion": (promotion_record(tags) or {}).get("kind"),
        "complete": tags.get(COMPLETE_TAG) == "complete",
    }


def _aliases_by_version(registry: Registry) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for alias, version in registry.aliases().items():
        out.setdefault(version, []).append(alias)
    return out


def list_versions(registry: Registry) -> list[dict[str, Any]]:
    """Every version, newest first (UserError when the model does not exist but others do: a mistyped name)."""
    registry.require_model(empty_store_ok=True)
    by_version = _aliases_by_version(registry)
    return [version_record(mv, by_version) for mv in reversed(registry.versions())]


def show_version(registry: Registry, version: str) -> dict[str, Any]:
    """Everything recorded about one version: its tags and its lineage (UserError when it does not exist)."""
    mv = registry.get_version(version)
    tags = dict(mv.tags or {})
    lineage = registry.lineage(mv)
    record = version_record(mv, _aliases_by_version(registry))
    promotion = promotion_record(tags) or {}
    record.update(
        {
            "source": mv.source,
            "status": str(mv.status),
            # Every metric scored (the tags hold the headline one).
            "metrics": lineage.get("metrics") or record["metrics"],
            "blessing_reasons": lineage.get("blessing_reasons", []),
            "compared_with": lineage.get("compared_with") or None,
            # What fired the run that made it (the watcher's drift or decay finding), beside the trigger's name.
            "trigger_reason": lineage.get("trigger_reason"),
            "evaluation": lineage.get("evaluation", {}),
            "promotion_decision": tags.get("ctpipe.promotion_decision"),
            "promoted_by": promotion.get("by"),
            "promotion_reason": promotion.get("reason"),
            "promotion_reason_uri": promotion.get("reason_uri") or None,
            "promoted_at": promotion.get("at"),
            # The latest `ctpipe models reproduce` of this version (None: never reproduced).
            "reproduction": reproduction_record(tags),
            "tags": {k: v for k, v in sorted(tags.items()) if k != "ctpipe.config"},
            "lineage": {k: v for k, v in sorted(lineage.items()) if k not in ("config", "metrics")},
            "config": lineage.get("config", {}),
            "champion_history": [
                e for e in registry.champion_history() if str(e.get("version")) == str(mv.version)
            ],
        }
    )
    return record
