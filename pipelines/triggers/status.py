"""``ctpipe watch --status``: the data versions the watcher has seen, each with its attempts and outcome."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ctpipe.components.lib.processes import pid_alive
from ctpipe.pipelines.triggers.ledger import ACTIVE, Ledger
from ctpipe.pipelines.triggers.retry import settle, version_state
from ctpipe.pipelines.triggers.start import on_another_host

# What each attempt shows of its record.
ATTEMPT_KEYS = (
    "attempt", "status", "failure", "error", "error_type", "pid", "host", "run_id", "run_name", "exit_code",
    "model_version", "data_fingerprint", "model_fingerprint", "config_sha256", "attempt_claimed_at", "started_at",
    "finished_at", "settled_at", "stopped_leftovers", "log", "summary_path", "start_error",
)  # fmt: skip


def list_versions(home: str | Path) -> list[dict[str, Any]]:
    """Every data version in the ledger, newest claim first, with its state and attempts."""
    ledger = Ledger(home)
    records = sorted(ledger.records(), key=lambda r: r.get("claimed_at", 0), reverse=True)
    # Unreadable records first: the watcher starts nothing for their data versions until they are removed.
    versions = [
        {"fingerprint": path.stem, "state": "unreadable", "trigger": None, "data_uri": None, "claimed_at": None,
         "attempts": [], "decision": f"{path} is not valid JSON: check for a run of it, then delete the file",
         "next_attempt_after": None}
        for path in ledger.unreadable()
    ]  # fmt: skip
    for index, record in enumerate(records):
        alive = None
        local = record.get("backend") == "local" and record.get("pid") is not None and not on_another_host(record)
        if record.get("status") in ACTIVE and local:
            alive = pid_alive(int(record["pid"]))  # a killed run still says "running" until a check settles it
        versions.append(
            {
                "fingerprint": record.get("fingerprint"),
                "state": version_state(record, newest=index == 0, alive=alive),
                "trigger": record.get("trigger"),
                "data_uri": record.get("data_uri"),
                "claimed_at": record.get("claimed_at"),
                "attempts": [
                    {k: a[k] for k in ATTEMPT_KEYS if a.get(k) is not None} for a in record.get("attempts") or []
                ],
                "decision": record.get("decision") or _pending_decision(record),
                "settled_at": record.get("settled_at"),
                "next_attempt_after": record.get("next_attempt_after"),
            }
        )
    return versions


def _pending_decision(record: dict[str, Any]) -> str | None:
    """What the next check will settle an ended attempt as (a check that found nothing to do left it unsettled)."""
    if record.get("status") in ACTIVE or record.get("status") is None:
        return None
    from ctpipe.components.lib.config import WatchConfig

    return settle(record, WatchConfig(), time.time())["decision"] + " (ended; the next check settles it)"


def _when(seconds: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(seconds)) if seconds else "-"


def format_versions(versions: list[dict[str, Any]]) -> str:
    """A table of data versions with one indented line per attempt."""
    if not versions:
        return "no data versions in the ledger yet (no run was started by 'ctpipe watch' in this home)"
    lines = [f"{'data version':<14} {'state':<13} {'trigger':<9} {'claimed (UTC)':<19} attempts"]
    for v in versions:
        lines.append(
            f"{v['fingerprint'][:12]:<14} {v['state']:<13} {v['trigger'] or '-':<9} {_when(v['claimed_at']):<19} "
            f"{len(v['attempts'])}"
        )
        for a in v["attempts"]:
            where = f"pid {a['pid']}" + (f" on {a['host']}" if a.get("host") else "") if a.get("pid") else (f"KFP run {a['run_id']}" if a.get("run_id") else "not started")
            outcome = a.get("status", "?") + (f" ({a['failure']})" if a.get("failure") else "")
            extra = f" -> model version {a['model_version']}" if a.get("model_version") else ""
            config = f", config {a['config_sha256'][:8]}" if a.get("config_sha256") else ""
            lines.append(f"    attempt {a.get('attempt')}: {outcome}, {where}{extra}{config}")
            if a.get("error") or a.get("start_error"):
                error = a.get("error") or a["start_error"]
                one_line = " / ".join(part.strip() for part in error.splitlines() if part.strip())
                lines.append(f"      {one_line[:300]}")
        if v.get("decision") and v["state"] not in ("running", "starting"):
            # Why the entry stands where it does (settled: trained, rejected, superseded, given up; or waiting).
            lead = f"settled {_when(v['settled_at'])}: " if v.get("settled_at") else "-> "
            lines.append(f"    {lead}{v['decision'][:400]}")
    return "\n".join(lines)
