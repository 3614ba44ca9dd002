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
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from components.config import Config
from pipelines.triggers.atomic import atomic_write_text, private_name
from pipelines.triggers.ledger import Ledger
from pipelines.triggers.new_data import DataState, cache_path_for, data_state
from pipelines.triggers.start import stale_claim

REFERENCE_FILE = "reference/reference_stats.json"


@dataclass
class Champion:
    """What the watcher needs to know about the champion model version."""

    version: str
    run_id: str | None
    fingerprint: str | None


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
    dry_run: bool = False
    hashed_files: int = 0
    seconds: float = 0.0

    def to_line(self) -> str:
        return json.dumps(asdict(self), sort_keys=False, default=str)


# --- champion, with a cache keyed by the local tracking database's state -------------------------


def _store_key(tracking_uri: str) -> list[Any] | None:
    """A cheap identity of a local SQLite store's content (size and mtime of its files); None otherwise."""
    if not tracking_uri.startswith("sqlite:///"):
        return None
    db = Path(tracking_uri[len("sqlite:///") :])
    key = []
    for suffix in ("", "-wal", "-journal"):
        path = db.with_name(db.name + suffix)
        try:
            st = path.stat()
        except FileNotFoundError:
            key.append(None)
            continue
        key.append([st.st_size, st.st_mtime_ns])
    return key if key[0] is not None else None


def find_champion(tracking_uri: str, model_name: str, alias: str, cache_file: Path | None = None) -> Champion | None:
    """The version behind ``alias`` with its data fingerprint tag; None when there is no champion yet."""
    key = _store_key(tracking_uri)
    ident = [tracking_uri, model_name, alias, key]
    if cache_file is not None and key is not None:
        try:
            cached = json.loads(cache_file.read_text())
            if cached.get("ident") == ident:
                return Champion(**cached["champion"]) if cached["champion"] else None
        except (OSError, ValueError, KeyError, TypeError):
            pass
    from components.tracking import get_alias_version

    version = get_alias_version(tracking_uri, model_name, alias)
    champion = (
        Champion(version=str(version.version), run_id=version.run_id, fingerprint=(version.tags or {}).get("ctpipe.data_fingerprint"))
        if version is not None
        else None
    )
    if cache_file is not None and key is not None:
        # Re-read the key: it must describe the store as it was when we read it.
        if _store_key(tracking_uri) == key:
            _write_json(cache_file, {"ident": ident, "champion": asdict(champion) if champion else None})
    return champion


def load_reference(tracking_uri: str, model_name: str, champion: Champion, cache_dir: Path) -> dict[str, Any] | None:
    """The champion's reference statistics (downloaded once per version), or None when it has none."""
    local = cache_dir / model_name / champion.version / "reference_stats.json"
    if not local.exists():
        from components.tracking import download_version_file

        if champion.run_id is None:
            return None
        # The watcher's output is its JSON line; keep MLflow's download progress bar out of it.
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        tmp = cache_dir / model_name / champion.version / private_name(".download")
        path = download_version_file(tracking_uri, SimpleNamespace(run_id=champion.run_id), REFERENCE_FILE, tmp)
        if path is None:
            return None
        local.parent.mkdir(parents=True, exist_ok=True)
        Path(path).replace(local)
    return json.loads(local.read_text())


def _write_json(path: Path, payload: Any) -> None:
    atomic_write_text(path, json.dumps(payload))


# --- drift of the newest window, cached per (window, champion, thresholds) ---------------------


def window_drift(
    state: DataState, reference: dict[str, Any], config: Config, champion: Champion, reports_dir: Path
) -> tuple[dict[str, Any] | None, str]:
    """The drift report of the newest window as a dict (from cache when unchanged), and a note."""
    from components.data.files import fingerprint_files

    window = state.window(config.watch.window_partitions, config.watch.window_days)
    thresholds = json.dumps(asdict(config.watch), sort_keys=True)
    key = hashlib.sha256(f"{fingerprint_files(window)}|{champion.version}|{thresholds}".encode()).hexdigest()[:20]
    json_path, html_path = reports_dir / f"drift-{key}.json", reports_dir / f"drift-{key}.html"
    if json_path.exists() and html_path.exists():
        return json.loads(json_path.read_text()) | {"json_path": str(json_path), "html_path": str(html_path)}, "cached"
    from components.data.snapshot import read_data
    from pipelines.triggers.drift import compute_drift
    from pipelines.triggers.report import write_drift_report

    frame = read_data(state.data_uri, window)
    if len(frame) < config.watch.min_rows:
        return None, f"drift not judged: the newest window has {len(frame)} rows (< watch.min_rows={config.watch.min_rows})"
    partitions = sorted({f.path.rsplit("/", 1)[0] for f in window})
    report = compute_drift(frame, reference, config.watch, window=partitions, champion_version=champion.version)
    write_drift_report(report, json_path, html_path)
    return report.to_dict() | {"json_path": str(json_path), "html_path": str(html_path)}, "computed"


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
) -> Decision:
    """Decide (and unless ``dry_run``, start) at most one run for the data root's current fingerprint."""
    started = time.perf_counter()
    home = Path(home)
    watch_dir = home / "watch"
    now = time.time() if now is None else now
    state = data_state(data_uri, cache_path=cache_path_for(home, data_uri))
    champion = find_champion(
        tracking_uri, config.registry.model_name, config.registry.champion_alias, watch_dir / "champion-cache.json"
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
    trigger, reason = _choose_trigger(state, champion, config, tracking_uri, watch_dir, decision, now)
    ledger = Ledger(home)
    if trigger is not None:
        existing = ledger.get(state.fingerprint)
        if existing is not None and stale_claim(existing):
            # Claimed by a watcher that died before starting the run: not a run, so start it now.
            existing = None
            if not dry_run:
                ledger.release(state.fingerprint)
        if existing is not None:
            trigger, reason = None, _already(existing)
    if trigger is None or dry_run:
        decision.action = "run" if trigger else "none"
        decision.trigger = trigger
        decision.reason = reason if not dry_run or not trigger else f"dry run: would start a run ({reason})"
        decision.seconds = time.perf_counter() - started
        return decision
    decision.action, decision.trigger, decision.reason = _start(ledger, starter, state, trigger, reason, config, decision, now)
    decision.run = ledger.get(state.fingerprint) if decision.action == "run" else None
    decision.seconds = time.perf_counter() - started
    return decision


def _already(record: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(record.get("claimed_at", 0)))
    return (
        f"a run for this data fingerprint was already started at {when} UTC (trigger {record.get('trigger')}, "
        f"status {record.get('status')}); a fingerprint starts one run only"
    )


def _choose_trigger(
    state: DataState, champion: Champion | None, config: Config, tracking_uri: str, watch_dir: Path,
    decision: Decision, now: float,
) -> tuple[str | None, str]:
    watch = config.watch
    if champion is None:
        if watch.new_data:
            return "new_data", f"no '{config.registry.champion_alias}' model yet: the first run trains one"
        return None, "no champion yet and the new-data trigger is off (watch.new_data=false)"
    if champion.fingerprint == state.fingerprint:
        return None, (
            f"nothing new: the data fingerprint {state.fingerprint[:12]} is the one champion version "
            f"{champion.version} was trained on"
        )
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
        _settle(ledger, starter)
        if config.watch.max_running:
            active = [r for r in ledger.records() if starter.is_active(r)]
            if len(active) >= config.watch.max_running:
                names = ", ".join(r["fingerprint"][:12] for r in active)
                return "none", None, (
                    f"would start a {trigger} run, but {len(active)} run(s) started by the watcher are still going "
                    f"({names}; watch.max_running={config.watch.max_running}); it will be started by a later check"
                )
        claimed = ledger.claim(
            state.fingerprint,
            {
                "trigger": trigger,
                "reason": reason,
                "data_uri": state.data_uri,
                "champion_version": decision.champion_version,
                "drift_report": decision.drift_report,
                "drifted_columns": decision.drifted_columns,
                "watcher_pid": os.getpid(),
                "claimed_at": now,
            },
        )
        if not claimed:
            return "none", None, _already(ledger.get(state.fingerprint) or {})
    # Started outside the lock: the claimed record already counts as a run in flight for other watchers.
    try:
        info = starter.start(
            trigger=trigger,
            data_uri=state.data_uri,
            fingerprint=state.fingerprint,
            record_path=ledger.path(state.fingerprint),
        )
    except Exception:
        ledger.release(state.fingerprint)  # not started: a later check may try again
        raise
    ledger.update(state.fingerprint, **info)
    return "run", trigger, reason


def _settle(ledger: Ledger, starter) -> None:
    """Mark runs that ended without saying so (a killed process) as lost; release claims never started."""
    for record in ledger.records():
        if stale_claim(record):
            ledger.release(record["fingerprint"])
        elif record.get("status") == "running" and not starter.is_active(record):
            ledger.update(record["fingerprint"], status="lost" if record.get("backend") == "local" else "finished")


def watch_loop(*, interval: float, iterations: int | None = None, **check_args: Any) -> None:
    """Check every ``interval`` seconds, printing each decision; an error is printed, not fatal."""
    count = 0
    while iterations is None or count < iterations:
        try:
            print(check_once(**check_args).to_line(), flush=True)
        except Exception as err:  # keep watching: a flaky store or a half-written partition is retried
            print(json.dumps({"action": "error", "error": f"{type(err).__name__}: {err}"}), flush=True)
        count += 1
        if iterations is None or count < iterations:
            time.sleep(interval)
