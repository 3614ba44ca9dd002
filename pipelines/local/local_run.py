"""Run the pipeline locally: KFP's local runner on this machine, then the run's summary.

The same compiled-for-cluster pipeline runs through ``kfp.local.SubprocessRunner(use_venv=False)``:
each step is a subprocess of this interpreter, training launches its ranks with the local launcher,
and MLflow tracks into SQLite under the ctpipe home. Steps record their outcome in the run's folder
(``ctpipe.components.lib.kfp_support.step_status``), which is how the summary knows what passed, failed or was
skipped, and why. Beside it: ``ctpipe.pipelines.local.progress`` (what the terminal shows), ``ctpipe.pipelines.local.demo_setup``
(the demo data without ``--data``), ``ctpipe.pipelines.local.sigterm`` (SIGTERM stops the steps).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import TRIGGERS, Config
from ctpipe.components.lib.credentials import refuse_uri_credentials
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV
from ctpipe.components.lib.warm_start import WarmServer, client_prefix, running_server
from ctpipe.components.run_config import resolve_config
from ctpipe.pipelines.local.demo_setup import ensure_demo_data_for
from ctpipe.pipelines.local.kfp_local_patches import (
    log_without_colour,
    no_docker_runner_warning,
    step_output_decoded_leniently,
)
from ctpipe.pipelines.local.local_cache import cache_hits_recorded
from ctpipe.pipelines.local.progress import StepProgress, output_to
from ctpipe.pipelines.local.run_summary import build_summary, write_summary
from ctpipe.pipelines.local.sigterm import sigterm_stops_the_steps


def run_local(
    *,
    home: str | Path | None = None,
    data_uri: str | None = None,
    config_path: str | None = None,
    overrides: list[str] | None = None,
    trigger: str = "manual",
    verbosity: int = 0,
    process_started: float | None = None,
    parameters: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the pipeline locally end to end and return its summary (also written to summary.json).

    ``parameters``: values of the pipeline's typed run parameters (the Kubeflow UI's run form, e.g.
    ``{"training_steps": 200}``), applied over the config as on a cluster.

    ``process_started`` (the ``ctpipe`` process's start, from the CLI) is where the summary's
    ``timing.total_seconds`` counts from; without it, from this call.
    """
    called = time.time()
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    refuse_uri_credentials(data_uri, name="--data", recorded_in="the data URI is recorded in the run's summary and MLflow tags")
    home_dir = Path(home) if home else default_home()
    overrides = list(overrides or [])
    # The warm-start server imports the steps' libraries while this process goes on (the config, which
    # imports the task, the demo data, KFP): started first, so that these overlap its imports.
    with running_server() as warm:
        setup = {"cli_start_seconds": round(called - process_started, 3) if process_started else None}
        home_dir.mkdir(parents=True, exist_ok=True)
        demo = data_uri is None
        if demo:
            clock = time.time()
            # The task the file and --set name decides which demo data to write.
            data_uri = ensure_demo_data_for(home_dir, resolve_config(file=config_path, settings=overrides))
            setup["demo_data_seconds"] = round(time.time() - clock, 3)
        elif "://" not in data_uri:
            data_uri = str(Path(data_uri).resolve())
        config = resolve_config(file=config_path, settings=overrides, data_uri=data_uri, demo=demo)
        _preflight(config, data_uri)

        from ctpipe.components.lib.tracking import local_tracking_uri

        # No MLflow here: importing it costs the CLI a second or more. The first step (prepare_run) runs
        # alone and creates the SQLite database before any other step writes to it.
        tracking_uri = config.registry.tracking_uri or local_tracking_uri(home_dir)

        run_dir = _new_run_dir(home_dir)
        status_dir = run_dir / "steps"
        status_dir.mkdir()
        started = time.time()
        outcome = _run_pipeline(home_dir, run_dir, status_dir, data_uri, config, tracking_uri, trigger, verbosity, warm,
                                parameters)
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
        write_summary(run_dir, summary)
        server_log = warm.log_text() if warm is not None else ""
        if server_log:
            atomic_write_text(run_dir / "warm_start.log", server_log)
    return summary


def _run_pipeline(
    home: Path,
    run_dir: Path,
    status_dir: Path,
    data_uri: str,
    config: Config,
    tracking_uri: str,
    trigger: str,
    verbosity: int,
    warm: WarmServer | None = None,
    parameters: dict[str, Any] | None = None,
) -> str | None:
    """Run the KFP pipeline with the local runner; its logs go to run_dir/pipeline.log."""
    from kfp import local

    from ctpipe.pipelines.continuous_training import build_pipeline

    caching = config.pipeline.caching
    # Compiled with the resolved config as its own, as a cluster pipeline is: the run form's defaults are
    # this config's values and an empty config_json means it.
    pipeline = build_pipeline(None, default_config_json=config.to_json(), caching=caching)
    previous = os.environ.get(STATUS_DIR_ENV)
    os.environ[STATUS_DIR_ENV] = str(status_dir.resolve())
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    error = None
    try:
        with output_to(run_dir / "pipeline.log") as terminal:
            if verbosity >= 0:
                terminal.write(f"ctpipe: running the pipeline locally; logs: {run_dir / 'pipeline.log'}\n")
            with (
                sigterm_stops_the_steps(warm),
                StepProgress(status_dir, terminal, verbosity, log_path=run_dir / "pipeline.log"),
                _steps_start_warm(warm),
                step_output_decoded_leniently(),
                log_without_colour(),
                no_docker_runner_warning(),
                cache_hits_recorded(status_dir),
            ):
                local.init(
                    local.SubprocessRunner(use_venv=False),
                    pipeline_root=str((home / "pipeline_root").resolve()),
                    raise_on_error=False,
                    # The same cache as on a cluster: validate..select reused while data, config and code hold.
                    enable_caching=caching,
                )
                try:
                    pipeline(
                        data_uri=data_uri,
                        trigger=trigger,
                        config_json="",
                        config_overrides="",
                        mlflow_tracking_uri=tracking_uri,
                        **(parameters or {}),
                    )
                except Exception as err:  # the local runner raising is a failed run, reported in the summary
                    error = f"{type(err).__name__}: {err}"
    finally:
        if previous is None:
            os.environ.pop(STATUS_DIR_ENV, None)
        else:
            os.environ[STATUS_DIR_ENV] = previous
    return error


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


def _preflight(config: Config, data_uri: str) -> None:
    """Cheap checks that give a clear error before any subprocess starts."""
    from ctpipe.components.lib.data.files import data_columns
    from ctpipe.components.lib.data.snapshot import check_named_columns, list_data_files
    from ctpipe.components.tasks import load_task
    from ctpipe.components.tasks.registry import label_column

    task = load_task(config.task)  # the task's module imports and its factory returns a complete task
    list_data_files(data_uri, with_hashes=False)
    # A label, key or feature the data does not have shows in the first file's header: said now, not after
    # the start-up and prepare_run (validation says the same, with the same words, for every file).
    columns = data_columns(data_uri)
    if columns:
        check_named_columns(columns, label=label_column(task, config.data), key=config.data.key,
                            features=list(config.data.features))


def _new_run_dir(home: Path) -> Path:
    """A new folder of its own for this run under HOME/runs (UTC time and pid)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = home / "runs" / f"{stamp}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def default_home() -> Path:
    """The ctpipe home: $CTPIPE_HOME, else ./.ctpipe."""
    return Path(os.environ.get("CTPIPE_HOME") or ".ctpipe")
