"""Run the whole pipeline on this machine with KFP's local runner, and summarise it.

The same compiled-for-cluster pipeline runs through ``kfp.local.SubprocessRunner(use_venv=False)``:
each step is a subprocess of this interpreter, training launches its ranks with the local launcher,
and MLflow tracks into SQLite under the ctpipe home. Steps record their outcome in the run's folder
(``components.kfp_support.step_status``), which is how the summary knows what passed, failed or was
skipped, and why.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shlex
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.config import TRIGGERS, Config
from components.config.rules import host_of_uri_with_credentials
from components.errors import ConfigError, UserError
from components.kfp_support import STATUS_DIR_ENV
from components.tasks.run_config import load_run_config
from components.warm_start import WarmServer, client_prefix, running_server
from pipelines.kfp_local_patches import step_output_decoded_leniently
from pipelines.run_summary import build_summary, read_step_records

DEMO_KEY_COLUMN = "customer_id"
STEP_TITLES = {
    "prepare_run": "prepare run (config, MLflow run)",
    "validate_data": "validate data (fingerprint, splits, Great Expectations)",
    "sanity_checks": "sanity checks (init loss, overfit one batch, ...)",
    "train": "train (FSDP2, torch.distributed)",
    "select_checkpoint": "select best checkpoint",
    "evaluate": "evaluate against champion",
    "register": "register in MLflow",
}


def default_home() -> Path:
    """The ctpipe home: $CTPIPE_HOME, else ./.ctpipe."""
    return Path(os.environ.get("CTPIPE_HOME") or ".ctpipe")


def ensure_demo_data(home: Path) -> str:
    """Generate the demo dataset under the home once; return its path."""
    from components.data.demo import write_demo_data

    root = home / "data"
    _write_whole(root, write_demo_data)
    return str(root.resolve())


def _write_whole(root: Path, write) -> None:
    """Unless ``root`` has demo partitions, ``write(folder)`` them into a folder of its own beside it and
    move that into place: a run killed while writing, or a run started beside it, never leaves or sees
    the first days only (the next run would have trained on them)."""
    if any(root.glob("date=*/part-0.parquet")):
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}-") as tmp:
        staged = Path(tmp) / root.name
        write(str(staged))
        try:
            staged.rename(root)  # replaces an empty folder; fails when another run has put its own
        except OSError:
            if not any(root.glob("date=*/part-0.parquet")):
                raise


def ensure_demo_data_for(home: Path, config) -> tuple[str, list[str]]:
    """The configured task's demo data under the home (its ``write_demo_data``, else the tabular demo)
    and the config settings that go with it (the key column; the task's ``demo_settings``), which
    ``demo_data_and_config`` puts under the user's own."""
    from components.tasks import load_task

    task = load_task(config.task)
    writer = getattr(task, "write_demo_data", None)
    if writer is None:
        return ensure_demo_data(home), [f"data.key={DEMO_KEY_COLUMN}"]
    root = home / f"data-{task.name}"
    _write_whole(root, writer)
    return str(root.resolve()), list(getattr(task, "demo_settings", ()))


def demo_data_and_config(home: Path, config: Config, config_path: str | None, overrides: list[str]) -> tuple[str, Config]:
    """The task's demo data under the home, and the config with the demo's settings under the user's own:
    the config file and ``--set`` win over them."""
    data_uri, demo_settings = ensure_demo_data_for(home, config)
    if not demo_settings:
        return data_uri, config
    return data_uri, load_run_config(config_path, overrides, defaults=[demo_settings])


def _new_run_dir(home: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = home / "runs" / f"{stamp}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


class _Progress:
    """Prints one line per step as it starts and ends, from the status records the steps write."""

    def __init__(self, status_dir: Path, out, quiet: bool) -> None:
        self.status_dir = status_dir
        self.out = out
        self.quiet = quiet
        self.seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _emit(self, text: str) -> None:
        if not self.quiet:
            self.out.write(text + "\n")
            self.out.flush()

    def poll(self) -> None:
        from pipelines.continuous_training import STEP_NAMES

        records = read_step_records(self.status_dir)
        for index, step in enumerate(STEP_NAMES, start=1):
            status = records.get(step, {}).get("status")
            if status is None or self.seen.get(step) == status:
                continue
            self.seen[step] = status
            label = f"[{index}/{len(STEP_NAMES)}] {STEP_TITLES[step]}"
            if status == "running":
                self._emit(f"{label} ...")
            else:
                seconds = records[step].get("seconds", 0.0)
                mark = "passed" if status == "passed" else "FAILED"
                self._emit(f"{label}: {mark} in {seconds:.1f}s")

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self.poll()

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[Any]:
    """Send this process's (and its children's) stdout/stderr to a log; yield a writer to the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()


def _preflight(config: Config, data_uri: str) -> None:
    """Cheap checks that give a clear error before any subprocess starts."""
    from components.data.snapshot import list_data_files
    from components.tasks import load_task

    load_task(config.task)  # the task's module imports and its factory returns a complete task
    list_data_files(data_uri, with_hashes=False)


def run_local(
    *,
    home: str | Path | None = None,
    data_uri: str | None = None,
    config_path: str | None = None,
    overrides: list[str] | None = None,
    trigger: str = "manual",
    quiet: bool = False,
    process_started: float | None = None,
) -> dict[str, Any]:
    """Run the pipeline locally end to end and return its summary (also written to summary.json).

    ``process_started`` (the ``ctpipe`` process's start, from the CLI) is where the summary's
    ``timing.total_seconds`` counts from; without it, from this call.
    """
    called = time.time()
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    if (host := host_of_uri_with_credentials(data_uri)) is not None:  # it is recorded in summary.json and tags
        raise UserError(f"--data holds credentials (user:password@{host}); the data URI is recorded in the run's "
                        "summary and MLflow tags. Give it without them and the credentials in the environment.")
    home_dir = Path(home) if home else default_home()
    overrides = list(overrides or [])
    # The warm-start server imports the steps' libraries while this process goes on (the config, which
    # imports the task, the demo data, KFP): started first, so that these overlap its imports.
    with running_server() as warm:
        setup = {"cli_start_seconds": round(called - process_started, 3) if process_started else None}
        config = load_run_config(config_path, overrides)
        home_dir.mkdir(parents=True, exist_ok=True)
        if data_uri is None:
            clock = time.time()
            data_uri, config = demo_data_and_config(home_dir, config, config_path, overrides)
            setup["demo_data_seconds"] = round(time.time() - clock, 3)
        elif "://" not in data_uri:
            data_uri = str(Path(data_uri).resolve())
        _preflight(config, data_uri)

        from components.tracking import local_tracking_uri

        # No MLflow here: importing it costs the CLI a second or more. The first step (prepare_run) runs
        # alone and creates the SQLite database before any other step writes to it.
        tracking_uri = config.registry.tracking_uri or local_tracking_uri(home_dir)

        run_dir = _new_run_dir(home_dir)
        status_dir = run_dir / "steps"
        status_dir.mkdir()
        started = time.time()
        outcome = _run_pipeline(home_dir, run_dir, status_dir, data_uri, config, tracking_uri, trigger, quiet, warm)
        summary = build_summary(
            status_dir,
            run_dir=run_dir,
            data_uri=data_uri,
            config=config,
            tracking_uri=tracking_uri,
            trigger=trigger,
            seconds=time.time() - started,
            runner_error=outcome,
            total_seconds=time.time() - (process_started or called),
            setup_seconds=setup,
        )
        summary_path = run_dir / "summary.json"
        summary["summary_path"] = str(summary_path.resolve())
        summary_path.write_text(json.dumps(summary, indent=2, default=str))
        server_log = warm.log_text() if warm is not None else ""
        if server_log:
            (run_dir / "warm_start.log").write_text(server_log)
    return summary


@contextlib.contextmanager
def _steps_start_warm(warm: WarmServer | None) -> Iterator[None]:
    """Have the KFP local runner start each step through the warm-start server.

    ``SubprocessRunner(use_venv=False)`` puts this interpreter in place of ``python3`` in each step's
    command (``replace_python_executable``, kfp 2.17); here it puts the warm-start client there instead.
    """
    if warm is None:
        yield
        return
    from kfp.local import subprocess_task_handler

    original = subprocess_task_handler.replace_python_executable
    client = " ".join(shlex.quote(part) for part in client_prefix())

    def through_server(full_command: list[str], new_executable: str) -> list[str]:
        return original(full_command, client if new_executable == sys.executable else new_executable)

    subprocess_task_handler.replace_python_executable = through_server
    try:
        yield
    finally:
        subprocess_task_handler.replace_python_executable = original


def _run_pipeline(
    home: Path,
    run_dir: Path,
    status_dir: Path,
    data_uri: str,
    config: Config,
    tracking_uri: str,
    trigger: str,
    quiet: bool,
    warm: WarmServer | None = None,
) -> str | None:
    """Run the KFP pipeline with the local runner; its logs go to run_dir/pipeline.log."""
    from kfp import local

    from pipelines.continuous_training import build_pipeline

    pipeline = build_pipeline(None)
    previous = os.environ.get(STATUS_DIR_ENV)
    os.environ[STATUS_DIR_ENV] = str(status_dir.resolve())
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    error = None
    try:
        with _output_to(run_dir / "pipeline.log") as terminal:
            if not quiet:
                terminal.write(f"ctpipe: running the pipeline locally; logs: {run_dir / 'pipeline.log'}\n")
            with (
                _sigterm_stops_the_steps(warm),
                _Progress(status_dir, terminal, quiet),
                _steps_start_warm(warm),
                step_output_decoded_leniently(),
            ):
                local.init(
                    local.SubprocessRunner(use_venv=False),
                    pipeline_root=str((home / "pipeline_root").resolve()),
                    raise_on_error=False,
                )
                try:
                    pipeline(
                        data_uri=data_uri,
                        trigger=trigger,
                        config_json=config.to_json(),
                        config_overrides="",
                        mlflow_tracking_uri=tracking_uri,
                    )
                except Exception as err:  # the local runner raising is a failed run, reported in the summary
                    error = f"{type(err).__name__}: {err}"
    finally:
        if previous is None:
            os.environ.pop(STATUS_DIR_ENV, None)
        else:
            os.environ[STATUS_DIR_ENV] = previous
    return error


class Terminated(KeyboardInterrupt):
    """SIGTERM reached ``ctpipe run``: the run ends as after Ctrl-C (no summary), with exit code 143."""

    signum = signal.SIGTERM


TERM_GRACE_SECONDS = 5.0


@contextlib.contextmanager
def _sigterm_stops_the_steps(warm: WarmServer | None) -> Iterator[None]:
    """While the pipeline runs, SIGTERM to this process stops every process below it, then ends the run.

    Ctrl-C reaches all of a run's processes from the terminal; ``kill PID`` (a supervisor, a CI timeout)
    reaches this one only. Python's default, dying alone, left steps started cold and their training
    ranks running. The warm-start server is left out: it stops its own children when its block ends,
    each step as a SIGTERM would (ranks first, the step's record written).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signalled: list[int] = []

    def handler(signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
        signalled.extend(_descendants(os.getpid(), leave_out={warm.pid} if warm else set()))
        for pid in signalled:
            _kill(pid, signal.SIGTERM)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except Terminated:
        deadline = time.monotonic() + TERM_GRACE_SECONDS
        while any(_alive(pid) for pid in signalled) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in signalled:
            _kill(pid, signal.SIGKILL)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


def _descendants(root: int, leave_out: set[int]) -> list[int]:
    """The processes below ``root`` (Linux /proc), without those in ``leave_out`` and below them."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid for pid in children.get(root, []) if pid not in leave_out]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += [child for child in children.get(pid, []) if child not in leave_out]
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet waited for, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
