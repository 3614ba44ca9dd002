"""The watcher: start a run when new data lands or the newest partitions drift, once per data version.

    ctpipe watch --data DATA --home .ctpipe --once --dry-run

One check: fingerprint the data root (cached hashes, no data read when nothing changed); compare with
the fingerprint the champion was trained on (model-version tag ``ctpipe.data_fingerprint``); when it
differs, compare the newest window of partitions with the champion's reference statistics; then start
one run (``trigger=drift`` when drifted and out of cool-down, else ``trigger=new_data``), claimed in the
home's ledger so no other watcher starts it again. The champion and its reference statistics are cached
in the home while the local tracking database is unchanged, so a check with nothing new does not even
import MLflow.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.credentials import redact_text, refuse_uri_credentials
from ctpipe.pipelines.triggers.champion import (
    REFERENCE_FILE,
    Champion,
    champion_settings,
    ensure_local_store,
    find_champion,
    load_reference,
)
from ctpipe.pipelines.triggers.health import judge_health
from ctpipe.pipelines.triggers.housekeeping import tidy
from ctpipe.pipelines.triggers.ledger import ACTIVE, Ledger
from ctpipe.pipelines.triggers.new_data import DataState, cache_path_for, data_state
from ctpipe.pipelines.triggers.retry import already_started, next_step, settle, stale_claim
from ctpipe.pipelines.triggers.window_drift import window_drift


@dataclass
class Decision:
    """The outcome of one check; ``to_line()`` is the JSON the CLI prints last."""

    action: str  # none | run
    trigger: str | None
    fingerprint: str
    reason: str
    champion_version: str | None = None
    champion_fingerprint: str | None = None
    drift: dict[str, dict[str, Any]] = field(default_factory=dict)
    drifted_columns: list[str] = field(default_factory=list)
    drift_report: str | None = None
    drift_report_html: str | None = None
    run: dict[str, Any] | None = None
    attempt: int | None = None  # the attempt started (action run) or the data version's current one
    # Settings the run takes from the champion's lineage (its data.key, data.label), where the user gave none.
    champion_settings: list[str] = field(default_factory=list)
    dry_run: bool = False
    hashed_files: int = 0
    seconds: float = 0.0
    # The resolved config this check runs with: a data version that failed as a user error under another
    # config is started again (the ledger keys a failed attempt by data and config).
    config_sha256: str | None = None
    # Freshness and silent failures (health.py): the figures, their limits and the problems; also health.json.
    health: dict[str, Any] | None = None
    # The decay check (``--labels``, decay.py): the champion on closed cohorts of late labels.
    decay: dict[str, Any] | None = None
    # What the check pruned to stay bounded (housekeeping.py): old reports, old prediction-log partitions.
    housekeeping: dict[str, Any] | None = None

    def to_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=False, default=str)

    def to_text(self) -> str:
        """The decision for a person: what was done for which data version, and why."""
        version = f"data version {self.fingerprint[:12]}"
        if self.action == "run":
            verb = "would start a run" if self.dry_run else f"started run attempt {self.attempt or 1}"
            text = f"{verb} for {version} (trigger {self.trigger}): {self.reason}"
        else:
            text = f"no run for {version}: {self.reason}"
        if self.drifted_columns:
            text += f"\n  drifted columns: {', '.join(self.drifted_columns)}"
        if self.drift_report_html or self.drift_report:
            text += f"\n  drift report: {self.drift_report_html or self.drift_report}"
        if self.champion_version:
            text += f"\n  champion: version {self.champion_version}"
        if self.champion_settings:
            text += f"\n  as the champion was trained: {' '.join(self.champion_settings)}"
        if self.decay is not None:
            text += f"\n  decay: {self.decay['reason']}\n  decay report: {self.decay.get('report_html') or self.decay.get('report_path')}"
        if self.health is not None:
            problems = self.health.get("problems") or []
            text += "\n  health: " + ("ALERT" if problems else "ok") + "".join(f"\n    - {p}" for p in problems)
        return text


# --- one check -----------------------------------------------------------------------------------


def check_once(
    *,
    data_uri: str,
    home: str | Path,
    config: Config,
    tracking_uri: str,
    starter=None,
    dry_run: bool = False,
    now: float | None = None,
    from_champion: tuple[str, ...] = (),
    labels_uri: str | None = None,
) -> Decision:
    """Decide (and unless ``dry_run``, start) at most one run for the data root's current fingerprint.

    A fingerprint without a record gets its first attempt when a trigger fires; one with a record is
    followed up: an attempt that ended without success is settled (lost, failed, and whose fault) and,
    for an infrastructure failure, retried after its backoff, up to ``watch.max_attempts``.

    ``from_champion`` names the settings (``data.key``, ``data.label``) a new run takes from the config the
    champion was trained with, where it differs: those the user did not give (``ctpipe watch`` passes them).
    """
    started = time.perf_counter()
    # Before the data root is listed: its URI goes into the hash cache, the ledger and every run started.
    for name, uri in (("data_uri", data_uri), ("tracking_uri", tracking_uri)):
        refuse_uri_credentials(uri, name=name, recorded_in="the watcher records it in its ledger and hash cache")
    home = Path(home)
    watch_dir = home / "watch"
    now = time.time() if now is None else now
    state = data_state(data_uri, cache_path=cache_path_for(home, data_uri))
    ensure_local_store(tracking_uri, watch_dir)
    champion = find_champion(
        tracking_uri, config.registry.model_name, config.registry.champion_alias, watch_dir / "champion-cache.json",
        retry=_retry_policy(config),
    )
    decision = Decision(
        action="none",
        trigger=None,
        fingerprint=state.fingerprint,
        reason="",
        champion_version=champion.version if champion else None,
        champion_fingerprint=champion.fingerprint if champion else None,
        dry_run=dry_run,
        hashed_files=state.hashed,
    )
    ledger = Ledger(home)
    # Judged before deciding: a stopped feed or a stale champion is reported even when nothing else happens.
    health = judge_health(home=home, state=state, champion=champion, watch=config.watch, now=now)
    decision.health = health.to_dict() | {"mlflow": log_health_quietly(health, home, tracking_uri, config)}
    if decision.health["mlflow"]:  # that write changed the store: cache the champion against it now, while
        find_champion(tracking_uri, config.registry.model_name, config.registry.champion_alias,  # MLflow is loaded
                      watch_dir / "champion-cache.json", retry=_retry_policy(config))
    if labels_uri and champion is not None:
        from ctpipe.pipelines.triggers.decay import watch_decay, with_settings

        # Labels join by the key (and label) the champion was trained with, unless the user gives them.
        as_trained = champion_settings(tracking_uri, config, champion, from_champion)
        decision.decay = watch_decay(labels_uri=labels_uri, config=with_settings(config, as_trained),
                                     tracking_uri=tracking_uri, version=champion.version, now=now,
                                     reports=watch_dir / "reports")
    decision.housekeeping = tidy(config, watch_dir / "reports", now, dry_run=dry_run)
    decision.config_sha256 = config_sha256(config)
    existing = _unless_stale_first_claim(ledger, state.fingerprint, now, dry_run)
    trained = champion is not None and champion.fingerprint == state.fingerprint
    if existing is not None and not trained:
        _follow_up(ledger, starter, existing, state, config, decision, now)
    else:
        trigger, reason = _choose_trigger(state, champion, config, tracking_uri, watch_dir, decision, now)
        if trigger is not None and champion is not None:  # read only for a run: the registry imports MLflow
            decision.champion_settings = champion_settings(tracking_uri, config, champion, from_champion)
        if trigger is None or dry_run:
            decision.action = "run" if trigger else "none"
            decision.trigger = trigger
            decision.attempt = 1 if trigger else None
            decision.reason = reason if not dry_run or not trigger else f"dry run: would start a run ({reason})"
        else:
            decision.action, decision.trigger, decision.reason = _start(ledger, starter, state, trigger, reason, config, decision, now)
            decision.attempt = 1 if decision.action == "run" else None
    decision.run = ledger.get(state.fingerprint) if decision.action == "run" and not dry_run else None
    decision.seconds = time.perf_counter() - started
    return decision


def log_health_quietly(health, home: Path, tracking_uri: str, config: Config) -> str | None:
    """The health figures' MLflow run when a point was logged now; a store that fails is reported, not fatal:
    the health file above already holds the figures."""
    from ctpipe.pipelines.triggers.health_metrics import log_health_metrics

    try:
        return log_health_metrics(health, home=home, tracking_uri=tracking_uri, config=config)
    except Exception as err:  # MLflow unreachable or refusing: the check goes on
        print(f"ctpipe watch: health metrics not logged to MLflow: {type(err).__name__}: {err}", file=sys.stderr)
        return None


def _retry_policy(config: Config):
    from ctpipe.components.lib.tracking import RetryPolicy

    return RetryPolicy.of(config.registry)


def _unless_stale_first_claim(ledger: Ledger, fingerprint: str, now: float, dry_run: bool) -> dict[str, Any] | None:
    """The record of ``fingerprint``, or None when it is a first claim whose watcher died before starting it."""
    existing = ledger.get(fingerprint)
    if existing is None or int(existing.get("attempt", 1)) != 1 or not stale_claim(existing, now):
        return existing
    if not dry_run:
        with ledger.locked():
            # Judged again under the lock: another watcher may have released and claimed it afresh.
            again = ledger.get(fingerprint)
            if again is not None and int(again.get("attempt", 1)) == 1 and stale_claim(again, now):
                ledger.release(fingerprint)
            elif again is not None:
                return again
    return None  # not a run: a trigger starts it now


def _already(record: dict[str, Any]) -> str:
    return already_started(record)


def _choose_trigger(
    state: DataState, champion: Champion | None, config: Config, tracking_uri: str, watch_dir: Path,
    decision: Decision, now: float,
) -> tuple[str | None, str]:
    watch = config.watch
    if champion is None:
        if watch.new_data:
            return "new_data", f"no '{config.registry.champion_alias}' model yet: the first run trains one"
        return None, "no champion yet and the new-data trigger is off (watch.new_data=false)"
    decayed = decision.decay is not None and decision.decay["decayed"]
    if champion.fingerprint == state.fingerprint:
        return None, (
            f"nothing new: the data fingerprint {state.fingerprint[:12]} is the one champion version "
            f"{champion.version} was trained on" + (f"; decay: {decision.decay['reason']} (a run waits for new data: "
                                                    "retraining on the same data would not help)" if decayed else "")
        )
    if decayed:
        last = Ledger(watch_dir.parent).last_started("decay")
        if last is None or now - last >= watch.cool_down_seconds:
            return "decay", decision.decay["reason"]
    drifted, drift_note = False, "drift check off (watch.drift=false)"
    if watch.drift:
        reference = load_reference(tracking_uri, config.registry.model_name, champion, watch_dir / "reference")
        if reference is None:
            drift_note = f"champion version {champion.version} has no {REFERENCE_FILE}: drift not judged"
        else:
            report, drift_note = window_drift(state, reference, config, champion, watch_dir / "reports")
            if report is not None:
                decision.drift = {name: _brief(col) for name, col in report["columns"].items()}
                decision.drifted_columns = list(report["drifted_columns"])
                decision.drift_report, decision.drift_report_html = report["json_path"], report["html_path"]
                drifted = bool(report["drifted"])
                drift_note = (
                    f"drift in {', '.join(report['drifted_columns'])}" if drifted else "no drift in the newest window"
                )
    if drifted:
        last = Ledger(watch_dir.parent).last_started("drift")
        if last is not None and now - last < watch.cool_down_seconds:
            remaining = watch.cool_down_seconds - (now - last)
            drift_note += f", but a drift run started {now - last:.0f} s ago (cool-down: {remaining:.0f} s left)"
        else:
            return "drift", drift_note
    if watch.new_data:
        return "new_data", f"new data (fingerprint {state.fingerprint[:12]} differs from the champion's); {drift_note}"
    return None, f"new data, but the new-data trigger is off and {drift_note}"


def _brief(column: dict[str, Any]) -> dict[str, Any]:
    return {k: column[k] for k in ("statistic", "value", "threshold", "drifted")}


def _start(
    ledger: Ledger, starter, state: DataState, trigger: str, reason: str, config: Config, decision: Decision, now: float
) -> tuple[str, str | None, str]:
    if starter is None:
        raise ValueError("check_once needs a starter unless dry_run=True")
    with ledger.locked():
        _settle_all(ledger, starter, config, now)
        busy = _too_busy(ledger, starter, config, state.fingerprint, f"would start a {trigger} run")
        if busy:
            return "none", None, busy
        claimed = ledger.claim(
            state.fingerprint,
            {
                "trigger": trigger,
                "reason": reason,
                "data_uri": state.data_uri,
                "champion_version": decision.champion_version,
                "drift_report": decision.drift_report,
                "drifted_columns": decision.drifted_columns,
                "decay_report": (decision.decay or {}).get("report_path"),
                # Every attempt's run reads them here (start.py), the retries' too.
                "champion_settings": decision.champion_settings,
                "watcher_pid": os.getpid(),
                "claimed_at": now,
            },
        )
        if not claimed:
            return "none", None, _already(ledger.get(state.fingerprint) or {})
    # Started outside the lock: the claimed record already counts as a run in flight for other watchers.
    _launch(ledger, starter, state, trigger, 1, decision.config_sha256)
    return "run", trigger, reason


def _follow_up(
    ledger: Ledger, starter, record: dict[str, Any], state: DataState, config: Config, decision: Decision, now: float
) -> None:
    """A data version that has a record: settle its ended attempt, then wait, retry, or say why not."""
    fingerprint, dry_run = state.fingerprint, decision.dry_run
    with ledger.locked():
        # Re-read under the lock: of watchers racing here, the first settles and claims, the others see it.
        record = ledger.get(fingerprint) or record
        record = _settle(ledger, starter, record, config, now, write=not dry_run)
        step = next_step(record, now, decision.config_sha256)
        decision.attempt = step.attempt
        if step.action == "wait":
            decision.reason = step.reason
            return
        trigger = record.get("trigger") or "new_data"
        if starter is not None and not dry_run:
            _settle_all(ledger, starter, config, now)
        busy = _too_busy(ledger, starter, config, fingerprint, f"would start attempt {step.attempt} ({step.reason})")
        if busy:
            decision.reason = busy
            return
        if dry_run:
            decision.action, decision.trigger = "run", trigger
            decision.reason = f"dry run: would start attempt {step.attempt} ({step.reason})"
            return
        if not ledger.claim_attempt(fingerprint, step.attempt, now=now, restart=step.action == "restart"):
            decision.reason = _already(ledger.get(fingerprint) or record)
            return
    _launch(ledger, starter, state, trigger, step.attempt, decision.config_sha256)
    decision.action, decision.trigger, decision.reason = "run", trigger, step.reason


def _too_busy(ledger: Ledger, starter, config: Config, fingerprint: str, wanted: str) -> str | None:
    """Why nothing may start now (watch.max_running runs of other data versions still going), else None."""
    if not config.watch.max_running or starter is None:
        return None
    active = [r for r in ledger.records() if r.get("fingerprint") != fingerprint and starter.is_active(r)]
    if len(active) < config.watch.max_running:
        return None
    from ctpipe.pipelines.triggers.start import on_another_host

    names = ", ".join(r["fingerprint"][:12] + (f" on {r['host']}" if on_another_host(r) else "") for r in active)
    return (
        f"{wanted}, but {len(active)} run(s) started by the watcher are still going "
        f"({names}; watch.max_running={config.watch.max_running}); it will be started by a later check (a run "
        "on another machine is settled there: if that machine is gone for good, delete its ledger record)"
    )


def config_sha256(config: Config) -> str:
    """The digest of the resolved config a run of this check gets (recorded per attempt)."""
    return hashlib.sha256(config.to_json().encode()).hexdigest()


def _launch(ledger: Ledger, starter, state: DataState, trigger: str, attempt: int, config_digest: str | None) -> None:
    """Start the claimed ``attempt`` and record it; a start that fails is recorded (or, first, released)."""
    if starter is None:
        raise ValueError("check_once needs a starter unless dry_run=True")
    fingerprint = state.fingerprint
    # Before the run starts: a run that ends at once (a user error) is judged against its own config.
    ledger.update_attempt(fingerprint, attempt, config_sha256=config_digest)
    try:
        info = starter.start(
            trigger=trigger, data_uri=state.data_uri, fingerprint=fingerprint, record_path=ledger.path(fingerprint)
        )
    except Exception as err:
        from ctpipe.components.lib.errors import UserError

        message = redact_text(f"the run could not be started: {type(err).__name__}: {err}")[:500]
        if attempt == 1:
            ledger.release(fingerprint)  # not started: a later check may try again
        elif isinstance(err, UserError):
            ledger.update_attempt(fingerprint, attempt, status="failed", user_error=True, error=message, finished_at=time.time())
        else:
            # The request may have created the run before it failed (a timeout): the next check starts this
            # attempt again under the same run name, which re-attaches to such a run instead of adding one.
            ledger.update_attempt(fingerprint, attempt, start_error=message)
        raise
    with ledger.locked():
        current = ledger.get(fingerprint) or {}
        if current.get("status") not in ACTIVE:
            info = {k: v for k, v in info.items() if k != "status"}  # it already reported its own end
        ledger.update_attempt(fingerprint, attempt, **info)


def _settle(ledger: Ledger, starter, record: dict[str, Any], config: Config, now: float, *, write: bool) -> dict[str, Any]:
    """Close the record's current attempt if it has ended and is not yet settled; return the record."""
    if record.get("settled_at") is not None:
        return record
    if record.get("status") in ACTIVE:
        ended = _ended(starter, record, read_only=not write)
        if ended is None:
            return record  # still going, or a claim being started
    else:
        ended = {}
    fields = {**ended, **settle({**record, **ended}, config.watch, now)}
    if not write:
        return {**record, **fields}
    return ledger.update_attempt(record["fingerprint"], int(record.get("attempt", 1)), **fields) or {**record, **fields}


def _ended(starter, record: dict[str, Any], *, read_only: bool) -> dict[str, Any] | None:
    """How the record's attempt ended (None: still going); without a starter (a dry run) local pids are checked."""
    if starter is not None and hasattr(starter, "ended"):
        return starter.ended(record, read_only=read_only)
    if starter is not None:  # a starter that only says whether a run is active: gone means lost
        return None if starter.is_active(record) else {"status": "lost", "error": "the run is no longer active"}
    from ctpipe.components.lib.processes import pid_alive
    from ctpipe.pipelines.triggers.start import on_another_host

    if record.get("backend") == "local" and record.get("pid") is not None and not on_another_host(record) \
            and not pid_alive(int(record["pid"])):
        return {"status": "lost", "error": f"process {record['pid']} is gone without recording an outcome"}
    return None


def _settle_all(ledger: Ledger, starter, config: Config, now: float) -> None:
    """Settle every record whose attempt ended without saying so (a killed process); release claims never
    started. Called with the lock held, so the concurrency limit counts only runs really going."""
    for record in ledger.records():
        if int(record.get("attempt", 1)) == 1 and stale_claim(record, now):
            ledger.release(record["fingerprint"])
        elif record.get("status") in ACTIVE:
            _settle(ledger, starter, record, config, now, write=True)


def watch_loop(*, interval: float, iterations: int | None = None, as_json: bool = True, **check_args: Any) -> None:
    """Check every ``interval`` seconds, printing each decision (JSON or text); an error is printed, not fatal."""
    count = 0
    while iterations is None or count < iterations:
        try:
            decision = check_once(**check_args)
            print(decision.to_line() if as_json else decision.to_text(), flush=True)
        except Exception as err:  # keep watching: a flaky store or a half-written partition is retried
            error = redact_text(f"{type(err).__name__}: {err}")
            print(json.dumps({"action": "error", "error": error}) if as_json else f"check failed: {error}", flush=True)
        count += 1
        if iterations is None or count < iterations:
            time.sleep(interval)
