"""Read a Kubeflow job object's status: its phase, why it failed, when it was created."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def job_phase(job: dict[str, Any]) -> str:
    """Succeeded / Failed when a terminal condition is true, else the latest true condition, else Pending.

    PyTorchJob (v1) reports ``Succeeded``, TrainJob (v2) ``Complete``; both read as Succeeded.
    """
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c for c in conditions if c.get("status") == "True"]
    if any(c.get("type") == "Failed" for c in true):
        return "Failed"
    if any(c.get("type") in ("Succeeded", "Complete") for c in true):
        return "Succeeded"
    return true[-1].get("type", "Pending") if true else "Pending"


def jobs_progress(job: dict[str, Any]) -> str:
    """A TrainJob's pods per replicated job, as Trainer copies them from its JobSet (``status.jobsStatus``),
    e.g. ``node: 4 active, 4 ready, 0 succeeded, 0 failed``; empty when absent (a PyTorchJob, or not yet)."""
    parts = []
    for status in (job.get("status") or {}).get("jobsStatus") or []:
        counts = ", ".join(f"{status.get(key) or 0} {key}" for key in ("active", "ready", "succeeded", "failed"))
        parts.append(f"{status.get('name')}: {counts}")
    return "; ".join(parts)


def failure_reason(job: dict[str, Any]) -> str:
    """The Failed condition's reason and message, as the operator wrote them."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Failed" and cond.get("status") == "True":
            return f"{cond.get('reason') or 'Failed'}: {cond.get('message') or 'no message'}"
    return "Failed: no reason recorded"


def created_at(job: dict[str, Any]) -> float | None:
    """The job's creationTimestamp in epoch seconds, or None when absent or unreadable."""
    stamp = (job.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).timestamp()
    except ValueError:
        return None
