"""The tags ctpipe keeps on the registered model and its versions, and the reading of a promotion record.

The registered model carries the champion stack and history (``STACK_TAG``, ``HISTORY_TAG``: ``history.py``);
a version its registration key and completeness (``KEY_TAG``, ``COMPLETE_TAG``), whether it served as it was
evaluated (``SERVABLE_TAG``), once the champion moved to it, one promotion record (``PROMOTION_TAG``) and, once
``ctpipe models reproduce`` rebuilt it, the latest reproduction's result (``REPRODUCTION_TAG``).
"""

from __future__ import annotations

import json
from typing import Any

STACK_TAG = "ctpipe.champion_stack"
HISTORY_TAG = "ctpipe.champion_history"
COMPLETE_TAG = "ctpipe.registration"  # "complete" on every version ctpipe created
KEY_TAG = "ctpipe.registration_key"
# Whether the version, loaded as a server does, served its test rows as evaluated (the register step's serving
# check; why not: the lineage's ``serving_check``, or a tag of its own on versions registered before the lineage).
SERVABLE_TAG = "ctpipe.servable"
MAX_STACK = 100
# What a champion move records on the version it moves to (``_move_champion``): one tag, a JSON object with its
# kind, when, who and why (the reason clipped, with the address of the whole text), so a champion carries one
# tag more than any version. Versions promoted before kept one tag per field (LEGACY_PROMOTION_TAGS): read alike.
PROMOTION_TAG = "ctpipe.promotion"
LEGACY_PROMOTION_TAGS = ("ctpipe.promoted_at", "ctpipe.promoted_by", "ctpipe.promotion_reason",
                         "ctpipe.promotion_reason_uri")
PROMOTION_KINDS = ("auto", "manual", "rollback")
# The latest reproduction of a version (``ctpipe models reproduce``): one short JSON object, overwritten by the next,
# so a version reproduced every day still carries one tag: when, the result, the reproduced weights' digest prefix,
# the largest parameter difference and the largest test-metric difference.
REPRODUCTION_TAG = "ctpipe.reproduction"
REPRODUCTION_FIELDS = ("at", "result", "weights_sha256", "max_param_diff", "max_metric_diff")


def promotion_record(tags: dict[str, str]) -> dict[str, str] | None:
    """The last champion move recorded on a version (``kind``, ``at``, ``by``, ``reason``, ``reason_uri``), or
    None when ctpipe never moved the champion to it. Reads both the one-tag record and the older layout."""
    value = tags.get(PROMOTION_TAG)
    if not value:
        return None
    if value.startswith("{"):
        try:
            record = json.loads(value)
        except ValueError:
            return None  # not ours: a tag set by hand
        if not isinstance(record, dict):
            return None
        return {field: str(record.get(field) or "") for field in ("kind", "at", "by", "reason", "reason_uri")}
    return {
        "kind": value,
        "at": tags.get("ctpipe.promoted_at", ""),
        "by": tags.get("ctpipe.promoted_by", ""),
        "reason": tags.get("ctpipe.promotion_reason", ""),
        "reason_uri": tags.get("ctpipe.promotion_reason_uri", ""),
    }


def recorded_champion_alias(lineage: dict[str, Any]) -> str | None:
    """The champion alias in the config a version was registered with (its lineage's ``config``), if readable."""
    config = lineage.get("config")
    alias = config.get("registry", {}).get("champion_alias") if isinstance(config, dict) else None
    return alias if isinstance(alias, str) else None  # absent, or (an older version's tag) clipped


def reproduction_record(tags: dict[str, str]) -> dict[str, Any] | None:
    """The latest reproduction recorded on a version (``REPRODUCTION_FIELDS``), or None when it was never
    reproduced (or the tag is not ours)."""
    try:
        record = json.loads(tags.get(REPRODUCTION_TAG) or "null")
    except ValueError:
        return None
    return {field: record.get(field) for field in REPRODUCTION_FIELDS} if isinstance(record, dict) else None
