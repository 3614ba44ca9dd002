"""Whether a data version's run is started again: at least once per data version, bounded.

An attempt that ended without success is classified from what it recorded (``ctpipe submit`` writes its
status, error and whether the error was the user's) or, when it recorded nothing, from the outside (a local
process that is gone: ``lost``; a KFP run's final state and, for a failed gate, the gate's verdict in
MLflow). Infrastructure failures are retried up to ``watch.max_attempts`` with exponential backoff; a
user error (bad data, a failed gate, bad config) or a run cancelled by an operator is not, and the
decision says why. When the cause cannot be told, the attempt counts as an infrastructure failure: a
wrong guess then costs at most ``max_attempts`` runs, while the opposite guess would lose the version.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ctpipe.components.lib.config import WatchConfig
from ctpipe.pipelines.triggers.ledger import ACTIVE

# A claim whose run was never recorded as started (the watcher died in between) stops counting as a
# run in flight after this long; the attempt is then started again by a later check.
STARTING_GRACE_SECONDS = 600.0


@dataclass(frozen=True)
class NextStep:
    """What a check does about a data version that already has a record."""

    action: str  # wait (in flight or nothing to do) | start (attempt n+1) | restart (attempt n again)
    reason: str
    attempt: int


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def claim_time(record: dict[str, Any]) -> float:
    return float(record.get("attempt_claimed_at", record.get("claimed_at", 0)) or 0)


def claim_in_flight(record: dict[str, Any], now: float | None = None) -> bool:
    """Whether a record is a fresh claim whose run is being started right now (no process or run id yet)."""
    now = time.time() if now is None else now
    if record.get("start_error"):
        return False  # its watcher tried and failed: nobody is starting it now
    return record.get("status") == "starting" and now - claim_time(record) < STARTING_GRACE_SECONDS


def stale_claim(record: dict[str, Any], now: float | None = None) -> bool:
    """A claim that never got a process or run id within the grace period."""
    no_run = record.get("pid") is None and record.get("run_id") is None
    return record.get("status") == "starting" and no_run and not claim_in_flight(record, now)


def backoff_seconds(watch: WatchConfig, failed_attempts: int) -> float:
    """The wait before the next attempt after ``failed_attempts`` failures: doubled each time, capped."""
    return min(watch.retry_backoff_seconds * 2 ** max(failed_attempts - 1, 0), watch.retry_max_backoff_seconds)


def failure_kind(record: dict[str, Any]) -> str | None:
    """How the current attempt ended: None (succeeded), ``data_changed``, ``user_error``, ``canceled`` or
    ``infrastructure``. A run that succeeded on other data than its record's (the data changed after the
    watcher saw it), or registered a model of other data, did not train this version: ``data_changed``."""
    status = record.get("status")
    if other_data(record) or record.get("error_type") == "DataChangedError":
        return "data_changed"
    if status == "succeeded":
        return None
    if status == "canceled":
        return "canceled"
    if record.get("user_error"):
        return "user_error"
    return "infrastructure"


def other_data(record: dict[str, Any]) -> str | None:
    """What the attempt trained on, when that is not the record's data version (else None)."""
    mine = record.get("fingerprint")
    seen, model = record.get("data_fingerprint"), record.get("model_fingerprint")
    if seen and seen != mine:
        return f"its run read data version {str(seen)[:12]}"
    if model and model != mine and record.get("model_version"):
        return f"model version {record['model_version']} it names was trained on data version {str(model)[:12]}"
    return None


def config_changed(record: dict[str, Any], config_sha256: str | None) -> bool:
    """Whether the resolved config differs from the one the record's current attempt ran with."""
    ran_with = record.get("config_sha256")
    return bool(config_sha256 and ran_with and ran_with != config_sha256)


def _what_happened(record: dict[str, Any]) -> str:
    n, error = record.get("attempt", 1), record.get("error")
    if record.get("status") == "lost":
        return f"attempt {n} was lost ({error or 'it ended without recording an outcome'})"
    if record.get("status") == "canceled":
        return f"attempt {n} was cancelled ({error or 'by an operator'})"
    return f"attempt {n} failed ({error or 'no error recorded'})"


def settle(record: dict[str, Any], watch: WatchConfig, now: float) -> dict[str, Any]:
    """The fields that close the current attempt, which has ended: its failure kind and what comes next."""
    n = int(record.get("attempt", 1))
    kind = failure_kind(record)
    fields: dict[str, Any] = {"settled_at": now, "failure": kind}
    if kind is None:
        version = f" (model version {record['model_version']})" if record.get("model_version") else ""
        fields["decision"] = f"trained: attempt {n} succeeded{version}"
    elif kind == "data_changed":
        why = other_data(record) or (record.get("error") or "the data changed during the run")
        # No backoff and no bound: only a check that finds this very data again follows it up.
        fields["next_attempt_after"] = now
        fields["decision"] = (
            f"not trained: attempt {n} did not train this data version ({why}); the data changed after the "
            "watcher saw it. The new version gets its own run; this one is started again only if the data "
            "returns to it"
        )
    elif kind == "user_error":
        fields["decision"] = (
            f"not retried: {_what_happened(record)}, a user error that a retry with the same data and config "
            "would repeat; fix the data (new data starts a new run) or the config (the next check with a "
            "changed config starts it again), or start one by hand with 'ctpipe submit'"
        )
    elif kind == "canceled":
        fields["decision"] = (
            f"not retried: {_what_happened(record)}; a cancelled run is an operator's decision. Start it again "
            "with 'ctpipe submit', or delete its ledger record so that the watcher does"
        )
    elif n >= watch.max_attempts:
        fields["given_up"] = True
        fields["decision"] = (
            f"gave up after {n} attempts (watch.max_attempts={watch.max_attempts}): {_what_happened(record)}. "
            "Look at the logs of the attempts ('ctpipe watch --status'), fix the cause, then start a run with "
            "'ctpipe submit' or delete the ledger record"
        )
    else:
        wait = backoff_seconds(watch, n)
        fields["next_attempt_after"] = now + wait
        fields["decision"] = (
            f"{_what_happened(record)}, an infrastructure failure: attempt {n + 1} of {watch.max_attempts} "
            f"after a backoff of {wait:.0f} s (from {_utc(now + wait)})"
        )
    return fields


def next_step(record: dict[str, Any], now: float, config_sha256: str | None = None) -> NextStep:
    """What to do about a data version whose current attempt is settled, in flight, or in its backoff.

    An attempt that failed as a user error is the data's and the config's: with the same config it would
    fail again, with another (``config_sha256``, the resolved config of this check) it is started again."""
    n = int(record.get("attempt", 1))
    status = record.get("status")
    if status not in ACTIVE and record.get("failure") == "user_error" and config_changed(record, config_sha256):
        return NextStep("start", f"retry: the config changed since attempt {n} failed as a user error "
                                 f"({record.get('error') or 'no error recorded'})", n + 1)
    if status in ACTIVE:
        if status == "starting" and record.get("start_error") and stale_claim(record, now):
            return NextStep("restart", f"attempt {n} is started again ({record['start_error']})", n)
        if status == "starting" and stale_claim(record, now):
            return NextStep("restart", f"attempt {n} was claimed by a watcher that died before starting it", n)
        return NextStep("wait", already_started(record), n)
    if status == "succeeded" and record.get("failure") != "data_changed":
        return NextStep("wait", already_started(record), n)
    if record.get("next_attempt_after") is None:
        return NextStep("wait", record.get("decision") or already_started(record), n)
    if now < float(record["next_attempt_after"]):
        left = float(record["next_attempt_after"]) - now
        return NextStep(
            "wait",
            f"{record.get('decision')}; attempt {n + 1} waits for its backoff ({left:.0f} s left)",
            n,
        )
    return NextStep("start", f"retry: {record.get('decision')}", n + 1)


def already_started(record: dict[str, Any]) -> str:
    return (
        f"a run for this data fingerprint was already started at {_utc(record.get('claimed_at', 0))} (trigger "
        f"{record.get('trigger')}, attempt {record.get('attempt', 1)}, status {record.get('status')}"
        f"{', on ' + record['host'] if record.get('host') else ''}); a "
        "fingerprint starts one run at a time, and again only after a failure that was not the user's"
    )


def version_state(record: dict[str, Any], *, newest: bool, alive: bool | None = None) -> str:
    """One word for ``ctpipe watch --status``: where this data version stands."""
    status = record.get("status")
    if status in ACTIVE:
        return "lost?" if alive is False else status
    if record.get("failure") == "data_changed" or other_data(record):
        return "superseded"  # its run trained other data: never "trained" by a model that did not see it
    if status == "succeeded":
        return "trained"
    if record.get("given_up"):
        return "given_up"
    kind = record.get("failure")
    if kind == "user_error":
        return "rejected"
    if kind == "canceled":
        return "canceled"
    if not newest:
        return "superseded"  # newer data arrived: its run trains on this version's data and more
    return "retry_pending" if record.get("next_attempt_after") is not None else "ended"
