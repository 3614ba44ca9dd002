"""How the watcher starts a run and tells whether it is still going: locally, on KFP, or (tests) a function."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pipelines.triggers.ledger import ACTIVE, read_record, update_record

# A claim whose run was never recorded as started (the watcher died in between) stops counting as a
# run in flight after this long, and is released so a later check can start it.
STARTING_GRACE_SECONDS = 600.0


def claim_in_flight(record: dict[str, Any]) -> bool:
    """Whether a record is a fresh claim whose run is being started right now (no process or run id yet)."""
    return record.get("status") == "starting" and time.time() - float(record.get("claimed_at", 0)) < STARTING_GRACE_SECONDS


def stale_claim(record: dict[str, Any]) -> bool:
    """A claim that never got a process or run id within the grace period."""
    no_run = record.get("pid") is None and record.get("run_id") is None
    return record.get("status") == "starting" and no_run and not claim_in_flight(record)


class RunStarter(Protocol):
    """Starts one pipeline run for a data fingerprint and reports whether a recorded run is active."""

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]: ...

    def is_active(self, record: dict[str, Any]) -> bool: ...


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc here: the signal check is all we have
    return state != "Z"


class LocalStarter:
    """Spawns ``ctpipe submit`` (the local pipeline) as a detached process that records its own outcome."""

    def __init__(self, home: str | Path, *, config_path: str | None = None, overrides: list[str] | None = None, wait: bool = False):
        self.home = Path(home)
        self.config_path = config_path
        self.overrides = list(overrides or [])
        self.wait = wait
        self._children: dict[int, subprocess.Popen] = {}

    def command(self, *, trigger: str, data_uri: str, record_path: Path) -> list[str]:
        cmd = [sys.executable, "-m", "pipelines.cli", "submit", "--trigger", trigger, "--data", data_uri]
        cmd += ["--home", str(self.home), "--record", str(record_path)]
        if self.config_path:
            cmd += ["--config", self.config_path]
        for assignment in self.overrides:
            cmd += ["--set", assignment]
        drift_report = (read_record(record_path) or {}).get("drift_report")
        if trigger == "drift" and drift_report:
            cmd += ["--drift-report", drift_report]
        return cmd

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        log = self.home / "watch" / "logs" / f"{fingerprint[:16]}-{trigger}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # A new session: the run survives the watcher (a CronJob pod or a terminal) going away.
            child = subprocess.Popen(
                self.command(trigger=trigger, data_uri=data_uri, record_path=record_path),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._children[child.pid] = child
        info = {"backend": "local", "pid": child.pid, "log": str(log), "status": "running"}
        # Record the process at once so other watchers see it running (the child adds its own fields).
        update_record(record_path, **{k: v for k, v in info.items() if k != "status"})
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
        return pid_alive(int(pid))


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
    ):
        self.client = client
        # Where the drift report that starts a drift run is recorded (MLflow), when given.
        self.tracking_uri = tracking_uri
        self.mlflow_experiment = mlflow_experiment
        self.experiment = experiment
        self.namespace = namespace
        self.service_account = service_account
        self.overrides = list(overrides or [])
        self.config_json = config_json

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        from pipelines.deploy import run_parameters, submit_run

        run_name = f"ctpipe-{trigger}-{fingerprint[:16]}"
        params = run_parameters(
            trigger=trigger, data_uri=data_uri, overrides=self.overrides, config_json=self.config_json, extra={}
        )
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
        report = (read_record(record_path) or {}).get("drift_report")
        if trigger == "drift" and report and self.tracking_uri:
            from pipelines.triggers.report import log_drift_report_for_pipeline_run

            try:
                info["drift_report_mlflow_run"] = log_drift_report_for_pipeline_run(
                    self.tracking_uri, self.mlflow_experiment, run.run_id, report
                )
            except Exception as err:  # the run is started; a tracking hiccup must not make it look unstarted
                info["drift_report_error"] = f"{type(err).__name__}: {err}"[:300]
        return info

    def is_active(self, record: dict[str, Any]) -> bool:
        from pipelines.deploy import run_is_active

        if record.get("status") not in ACTIVE:
            return False
        if record.get("backend") == "kfp" and record.get("run_id"):
            return run_is_active(self.client, record["run_id"])
        if record.get("pid") is None:
            return claim_in_flight(record)
        return pid_alive(int(record["pid"]))


class FunctionStarter:
    """Calls ``function(trigger=, data_uri=, fingerprint=)`` in-process (tests, embedding)."""

    def __init__(self, function: Callable[..., Any]):
        self.function = function

    def start(self, *, trigger: str, data_uri: str, fingerprint: str, record_path: Path) -> dict[str, Any]:
        result = self.function(trigger=trigger, data_uri=data_uri, fingerprint=fingerprint)
        return {"backend": "function", "status": "succeeded", "result": result if isinstance(result, str | int | float | dict | list | None) else str(result)}

    def is_active(self, record: dict[str, Any]) -> bool:
        return record.get("status") in ACTIVE


def record_outcome(record_path: str | Path, **fields: Any) -> None:
    """Called by ``ctpipe submit --record``: the run's own status in its ledger record."""
    update_record(record_path, **fields)
