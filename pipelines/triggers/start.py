"""How the watcher starts a run and tells whether it is still going: locally, on KFP, or (tests) a function.

Each starter also says how an attempt that is no longer going ended, when the attempt could not say so
itself (``ended``): a local process that is gone is ``lost`` (its leftover processes are stopped first, so
two attempts never run at once); a KFP run reports its final state, the tasks that failed and, when the
tracking server is known, whether a gate (validation, sanity) failed, which is the user's error.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ctpipe.components.lib.processes import pid_alive, signal_quietly, wait_gone
from ctpipe.pipelines.triggers.ledger import ACTIVE, read_record, update_attempt
from ctpipe.pipelines.triggers.retry import STARTING_GRACE_SECONDS, claim_in_flight, stale_claim  # noqa: F401 - re-exported

if TYPE_CHECKING:
    from ctpipe.components.lib.tracking import RetryPolicy

# Every process of a local attempt carries this in its environment (children inherit it), so the
# leftovers of an attempt whose own process was killed can be found and stopped, and nothing else.
RUN_MARKER_ENV = "CTPIPE_WATCH_RUN"
LEFTOVER_WAIT_SECONDS = 10.0


def attempt_of(record_path: Path) -> int:
    """The attempt the record at ``record_path`` is on (1 for a record that does not exist)."""
    return int((read_record(record_path) or {}).get("attempt", 1))


class RunStarter(Protocol):
    """Starts one pipeline run for a data fingerprint and reports whether a recorded run is active."""

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]: ...

    def is_active(self, record: dict[str, Any]) -> bool: ...

    def ended(self, record: dict[str, Any], *, read_only: bool = False) -> dict[str, Any] | None:
        """None while the recorded attempt is going; else what the record lacks about how it ended
        (``read_only``: judge without side effects, for a dry run)."""
        ...


def on_another_host(record: dict[str, Any]) -> bool:
    """Whether a local attempt runs on another machine sharing the home, whose processes cannot be seen here."""
    return bool(record.get("host")) and record["host"] != socket.gethostname()


class LocalStarter:
    """Spawns ``ctpipe submit`` (the local pipeline) as a detached process that records its own outcome."""

    def __init__(self, home: str | Path, *, config_path: str | None = None, overrides: list[str] | None = None, wait: bool = False):
        self.home = Path(home)
        self.config_path = config_path
        self.overrides = list(overrides or [])
        self.wait = wait
        self._children: dict[int, subprocess.Popen] = {}

    def command(self, *, trigger: str, data_uri: str, record_path: Path) -> list[str]:
        cmd = [sys.executable, "-m", "ctpipe.pipelines.cli.main", "submit", "--trigger", trigger, "--data", data_uri]
        cmd += ["--home", str(self.home), "--record", str(record_path), "--attempt", str(attempt_of(record_path))]
        # The data version the run is for: data that has moved on stops it before anything is reused.
        cmd += ["--fingerprint", (read_record(record_path) or {}).get("fingerprint") or Path(record_path).stem]
        if self.config_path:
            cmd += ["--config", self.config_path]
        for assignment in recorded_settings(record_path) + self.overrides:  # the user's own last: they win
            cmd += ["--set", assignment]
        record = read_record(record_path) or {}
        report = trigger_report(record, trigger)
        if report:
            cmd += ["--drift-report", report]  # the report that started it: drift's, or decay's
        if record.get("reason"):  # one argument, whatever the text starts with
            cmd += [f"--trigger-reason={record['reason']}"]
        return cmd

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        attempt = attempt_of(record_path)
        log = self.home / "watch" / "logs" / f"{fingerprint[:16]}-{trigger}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            out.write(f"--- attempt {attempt}, started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}\n".encode())
            out.flush()
            # A new session: the run survives the watcher (a CronJob pod or a terminal) going away.
            child = subprocess.Popen(
                self.command(trigger=trigger, data_uri=data_uri, record_path=record_path),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, RUN_MARKER_ENV: run_marker(record_path, attempt)},
            )
        self._children[child.pid] = child
        info = {"backend": "local", "pid": child.pid, "host": socket.gethostname(), "log": str(log),
                "marker": run_marker(record_path, attempt), "status": "running"}
        # Record the process at once so other watchers see it running (the child adds its own fields).
        update_attempt(record_path, attempt, **{k: v for k, v in info.items() if k != "status"})
        if self.wait:
            code = child.wait()
            # The child wrote its outcome into the record; trust it, fall back on the exit code.
            recorded = read_record(record_path) or {}
            status = recorded.get("status") if recorded.get("status") not in ACTIVE else None
            info.update(status=status or ("succeeded" if code == 0 else "failed"), exit_code=code)
        return info

    def is_active(self, record: dict[str, Any]) -> bool:
        if record.get("status") not in ACTIVE:
            return False
        pid = record.get("pid")
        if pid is None:
            return claim_in_flight(record)
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        if on_another_host(record):
            return True  # not ours to judge: its own report, or a watcher on its machine, settles it
        return pid_alive(int(pid)) and carries_marker(int(pid), record.get("marker"))

    def ended(self, record: dict[str, Any], *, read_only: bool = False) -> dict[str, Any] | None:
        if record.get("status") not in ACTIVE:
            return {}
        if record.get("pid") is None or self.is_active(record):
            return None  # going, or a claim being started (a stale one is started again, not settled)
        child = self._children.get(int(record["pid"]))
        code = child.returncode if child is not None else None
        return lost_local_attempt(record, exit_code=code, stop=not read_only)


def run_marker(record_path: Path, attempt: int) -> str:
    """The environment marker of one attempt of one ledger record (unique per home, data version, attempt)."""
    return f"{hashlib.sha256(str(Path(record_path).resolve()).encode()).hexdigest()[:16]}:{attempt}"


def carries_marker(pid: int, marker: str | None) -> bool:
    """Whether process ``pid`` is the attempt's (not a later process that got its pid); True when unknown."""
    if not marker:
        return True
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return True  # no /proc, or another user's process: the pid check is all we have
    return f"{RUN_MARKER_ENV}={marker}".encode() in environ.split(b"\0")


def marked_processes(marker: str) -> list[int]:
    """Live processes whose environment carries ``marker`` (Linux /proc; elsewhere none are found)."""
    needle = f"{RUN_MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and pid_alive(int(entry.name)):
                found.append(int(entry.name))
        except (OSError, ValueError):
            continue  # gone meanwhile, or another user's process
    return found


def stop_leftovers(marker: str, wait_seconds: float = LEFTOVER_WAIT_SECONDS) -> list[int]:
    """SIGKILL every process of an attempt whose own process is gone; return their pids once they are gone."""
    stopped = marked_processes(marker)
    for pid in stopped:
        signal_quietly(pid, signal.SIGKILL)
    wait_gone(stopped, wait_seconds)
    return stopped


def lost_local_attempt(record: dict[str, Any], exit_code: int | None = None, *, stop: bool = True) -> dict[str, Any]:
    """How a local attempt whose process is gone without a word ended; its leftovers are stopped first."""
    pid = record.get("pid")
    leftovers = stop_leftovers(record["marker"]) if stop and record.get("marker") else []
    how = f"exit code {exit_code}" if exit_code is not None else "no outcome recorded"
    if exit_code is not None and exit_code < 0:
        how = f"killed by {signal.Signals(-exit_code).name}"
    fields: dict[str, Any] = {
        "status": "lost",
        "error": f"process {pid} is gone ({how}): killed (the OOM killer, a node preemption, SIGKILL) or crashed",
        "stopped_leftovers": leftovers,
    }
    if exit_code is not None:
        fields["exit_code"] = exit_code
    return fields


class KfpStarter:
    """Creates a KFP run named after the fingerprint (a run of that name is reused, not duplicated)."""

    def __init__(
        self,
        client,
        *,
        experiment: str,
        namespace: str | None = None,
        service_account: str | None = None,
        overrides: list[str] | None = None,
        config_json: str | None = None,
        tracking_uri: str | None = None,
        mlflow_experiment: str = "ctpipe",
        retry: RetryPolicy | None = None,
    ):
        self.client = client
        # How the MLflow lookups of ``ended`` are retried (``registry.retries``; the defaults without it).
        self.retry = retry
        # Where the drift report that starts a drift run is recorded (MLflow), when given.
        self.tracking_uri = tracking_uri
        self.mlflow_experiment = mlflow_experiment
        self.experiment = experiment
        self.namespace = namespace
        self.service_account = service_account
        self.overrides = list(overrides or [])
        self.config_json = config_json

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        from ctpipe.pipelines.deploy.kfp_runs import run_parameters, submit_run

        run_name = kfp_run_name(trigger, fingerprint, attempt_of(record_path))
        # data_fingerprint: the version the run is for (a pipeline compiled by this ctpipe stops a run whose data
        # has moved on before anything is reused).
        # trigger_reason: what fired it (the drift or decay finding), recorded on the run and the version it registers.
        extra = {"data_fingerprint": fingerprint, "trigger_reason": (read_record(record_path) or {}).get("reason") or ""}
        report = trigger_report(read_record(record_path) or {}, trigger)
        logged, error = None, None
        if report and self.tracking_uri:
            from ctpipe.pipelines.triggers.report import log_report_before_run

            # Logged before the run exists: its page and the page's digest go with the run's parameters, and its
            # first step shows the page in the KFP UI (components/steps/prepare_run/trigger_page.py).
            try:
                logged = log_report_before_run(self.tracking_uri, self.mlflow_experiment, run_name, report,
                                               trigger=trigger)
                extra |= {"trigger_report_uri": logged[1], "trigger_report_sha256": logged[2]}
            except Exception as err:  # the run still starts; a tracking hiccup costs the page, not the run
                error = f"{type(err).__name__}: {err}"[:300]
        params = run_parameters(trigger=trigger, data_uri=data_uri, overrides=recorded_settings(record_path) + self.overrides,
                                config_json=self.config_json, extra=extra)
        run = submit_run(
            self.client,
            parameters=params,
            run_name=run_name,
            experiment=self.experiment,
            namespace=self.namespace,
            service_account=self.service_account,
            reuse_existing=True,
        )
        info = {"backend": "kfp", "run_id": run.run_id, "run_name": run_name, "status": "running"}
        if logged is not None:
            from ctpipe.pipelines.triggers.report import link_report_to_run

            info["drift_report_mlflow_run"] = logged[0]
            try:
                link_report_to_run(self.tracking_uri, logged[0], run.run_id)
            except Exception as err:  # the run is started; a tracking hiccup must not make it look unstarted
                error = f"{type(err).__name__}: {err}"[:300]
        if error:
            info["drift_report_error"] = error
        return info

    def is_active(self, record: dict[str, Any]) -> bool:
        from kfp_server_api.exceptions import ApiException

        from ctpipe.pipelines.deploy.kfp_runs import run_is_active

        if record.get("status") not in ACTIVE:
            return False
        if record.get("backend") == "kfp" and record.get("run_id"):
            try:
                return run_is_active(self.client, record["run_id"])
            except ApiException as err:
                if err.status == 404:
                    return False  # the run is gone: lost (see ended)
                raise
        if record.get("pid") is None:
            return claim_in_flight(record)
        return on_another_host(record) or pid_alive(int(record["pid"]))

    def ended(self, record: dict[str, Any], *, read_only: bool = False) -> dict[str, Any] | None:
        from kfp_server_api.exceptions import ApiException

        from ctpipe.pipelines.deploy.kfp_runs import ACTIVE_RUN_STATES, run_state

        if record.get("status") not in ACTIVE:
            return {}
        run_id = record.get("run_id")
        if not run_id:
            return None  # a claim being started (a stale one is started again, not settled)
        try:
            run = self.client.get_run(run_id)
        except ApiException as err:
            if err.status != 404:
                raise  # the API is down or refuses: nothing can be concluded, the check fails and is repeated
            return {"status": "lost", "error": f"KFP run {run_id} no longer exists (deleted, or the KFP database was reset)"}
        state = run_state(run)
        if state in ACTIVE_RUN_STATES:
            return None
        fields: dict[str, Any] = {"state": state, "finished_at": time.time()}
        if state == "SUCCEEDED":
            return {**fields, "status": "succeeded", **self._trained_on(run_id)}
        if state == "CANCELED":
            return {**fields, "status": "canceled", "error": f"KFP run {run_id} was cancelled"}
        failed = failed_tasks(run)
        gates = self._failed_gates(run_id)
        where = "; ".join(f"task {t['task']} failed" + (f": {t['error']}" if t.get("error") else "") for t in failed)
        where = where or getattr(run.error, "message", None) or "no failed task reported"
        fields.update(status="failed", failed_tasks=failed, user_error=bool(gates))
        if gates:
            fields["error"] = f"KFP run {run_id} {state}: the {' and the '.join(gates)} gate failed ({where})"
        elif gates is None:
            fields["error"] = (
                f"KFP run {run_id} {state} ({where}); the gates' verdicts in MLflow were not read (no tracking URI "
                "given to the watcher), so this counts as an infrastructure failure"
            )
        else:
            fields["error"] = f"KFP run {run_id} {state} ({where}); no gate failed: an infrastructure failure"
        return fields

    def _trained_on(self, pipeline_run_id: str) -> dict[str, Any]:
        """What a succeeded run read and registered, as its MLflow run records it (prepare_run's data fingerprint,
        register's version and that version's data fingerprint); empty when the tracking server is unknown."""
        if not self.tracking_uri:
            return {}
        from ctpipe.components.lib.tracking import tags_of_runs_tagged

        runs = tags_of_runs_tagged(self.tracking_uri, self.mlflow_experiment, "ctpipe.pipeline_run_id", pipeline_run_id,
                                   retry=self.retry)
        found: dict[str, Any] = {}
        for tags in runs:
            for tag, field in TRAINED_ON_TAGS.items():
                if tags.get(tag):
                    found[field] = tags[tag]
        return found

    def _failed_gates(self, pipeline_run_id: str) -> list[str] | None:
        """The gates that judged this run's data or model bad (recorded on its MLflow run); None: unknown."""
        if not self.tracking_uri:
            return None
        from ctpipe.components.lib.tracking import tags_of_runs_tagged

        runs = tags_of_runs_tagged(self.tracking_uri, self.mlflow_experiment, "ctpipe.pipeline_run_id", pipeline_run_id,
                                   retry=self.retry)
        return sorted({gate for tags in runs for tag, gate in GATE_TAGS.items() if tags.get(tag) == "failed"})


# What a pipeline run's MLflow run records of the data it read and the version it registered (prepare_run,
# register) -> the ledger's attempt fields: a run that trained other data does not settle its version as trained.
TRAINED_ON_TAGS = {"ctpipe.data_fingerprint": "data_fingerprint", "ctpipe.registered_version": "model_version",
                   "ctpipe.registered_data_fingerprint": "model_fingerprint"}
# The gates that record their verdict as a tag on the run's MLflow run: "failed" there is the user's error.
GATE_TAGS = {"ctpipe.validation": "data validation", "ctpipe.sanity": "training sanity"}


def kfp_run_name(trigger: str, fingerprint: str, attempt: int) -> str:
    """One deterministic name per data version and attempt: watchers of other homes re-attach to it."""
    base = f"ctpipe-{trigger}-{fingerprint[:16]}"
    return base if attempt == 1 else f"{base}-attempt-{attempt}"


def failed_tasks(run) -> list[dict[str, str]]:
    """The failed tasks of a KFP run. KFP's API says which, not why (a pod's OOM kill or exit code is in the
    UI and the logs); ``error`` is there only when the server set one."""
    details = getattr(getattr(run, "run_details", None), "task_details", None) or []
    out = []
    for task in details:
        if str(task.state or "").upper() == "FAILED":
            entry = {"task": task.display_name or task.task_id or "?"}
            message = getattr(task.error, "message", None) if task.error is not None else None
            if message:
                entry["error"] = message[:300]
            out.append(entry)
    return out


class FunctionStarter:
    """Calls ``function(trigger=, data_uri=, fingerprint=)`` in-process (tests, embedding)."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        result = self.function(trigger=trigger, data_uri=data_uri, fingerprint=fingerprint)
        return {"backend": "function", "status": "succeeded", "result": result if isinstance(result, str | int | float | dict | list | None) else str(result)}

    def is_active(self, record: dict[str, Any]) -> bool:
        return record.get("status") in ACTIVE

    def ended(self, record: dict[str, Any], *, read_only: bool = False) -> dict[str, Any] | None:
        return {} if record.get("status") not in ACTIVE else None


def recorded_settings(record_path: str | Path) -> list[str]:
    """The settings the watcher took from the champion for this data version (``watch.py``), from its record."""
    return [str(s) for s in (read_record(record_path) or {}).get("champion_settings") or []]


def record_outcome(record_path: str | Path, attempt: int | None = None, **fields: Any) -> None:
    """Called by ``ctpipe submit --record``: the run's own status in its ledger record, for its attempt
    (a late report of an attempt that was already settled and retried changes nothing)."""
    update_attempt(record_path, attempt, **fields)


def trigger_report(record: dict[str, Any], trigger: str) -> str | None:
    """The report that started a run of ``trigger`` (the drift report, the decay report), from its ledger record."""
    return record.get({"drift": "drift_report", "decay": "decay_report"}.get(trigger, "")) or None
