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
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import TRIGGERS, Config
from ctpipe.components.lib.credentials import redact_uri, refuse_uri_credentials
from ctpipe.components.lib.data.content_fingerprint import HASH_CACHE_ENV, home_cache_dir
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV
from ctpipe.components.lib.warm_start import WarmServer, client_prefix, running_server
from ctpipe.components.run_config import resolve_config
from ctpipe.pipelines.local.demo_setup import ensure_demo_data_for
from ctpipe.pipelines.local.home import default_home
from ctpipe.pipelines.local.kfp_local_patches import (
    kfp_without_its_client,
    log_without_colour,
    no_docker_runner_warning,
    step_output_decoded_leniently,
)
from ctpipe.pipelines.local.local_cache import cache_hits_recorded
from ctpipe.pipelines.local.progress import StepProgress, output_to
from ctpipe.pipelines.local.run_summary import build_summary, write_summary
from ctpipe.pipelines.local.sigterm import sigterm_stops_the_steps

# How the steps run: processes of this machine, or containers of the component image.
RUNNERS = ("subprocess", "container")


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
    runner: str = "subprocess",
    image: str | None = None,
    expected_fingerprint: str = "",
    trigger_reason: str = "",
) -> dict[str, Any]:
    """Run the pipeline locally end to end and return its summary (also written to summary.json).

    ``runner``: ``subprocess`` (each step a process of this machine) or ``container`` (each step in the
    component image, ``image`` or the config's ``kubernetes.image``: ``ctpipe.pipelines.local.container_runner``).
    ``expected_fingerprint``: the data version the run is for (the watcher's); data that has moved on stops
    the run in its first step, before any cached step is reused. ``trigger_reason``: what fired the trigger, in
    words (recorded on the run's MLflow run and the version it registers).

    ``parameters``: values of the pipeline's typed run parameters (the Kubeflow UI's run form, e.g.
    ``{"training_steps": 200}``), applied over the config as on a cluster.

    ``process_started`` (the ``ctpipe`` process's start, from the CLI) is where the summary's
    ``timing.total_seconds`` counts from; without it, from this call.
    """
    called = time.time()
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    refuse_uri_credentials(data_uri, name="--data", recorded_in="the data URI is recorded in the run's summary and MLflow tags")
    if runner not in RUNNERS:
        raise ConfigError(f"invalid runner {runner!r}; allowed: {', '.join(RUNNERS)}")
    home_dir = Path(home) if home else default_home()
    overrides = list(overrides or [])
    # The warm-start server imports the steps' libraries while this process goes on (the config, which
    # imports the task, the demo data, KFP): started first, so that these overlap its imports.
    # Steps in containers start from the image, not from this machine's warm-start server.
    with running_server(with_standby=True) if runner == "subprocess" else contextlib.nullcontext() as warm:
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
        if not config.validation.sketch_store:  # the per-partition statistics live in the home, run after run
            overrides.append(f"validation.sketch_store={(home_dir / 'sketches').resolve()}")
            config = resolve_config(file=config_path, settings=overrides, data_uri=data_uri, demo=demo)
        _preflight(config, data_uri)

        from ctpipe.components.lib.tracking import local_tracking_uri

        # No MLflow here: importing it costs the CLI a second or more. A new SQLite store is built ahead, forked
        # from the warm-start server (store_built_ahead), else by the first step, which runs alone.
        tracking_uri = config.registry.tracking_uri or local_tracking_uri(home_dir)

        run_dir = _new_run_dir(home_dir)
        status_dir = run_dir / "steps"
        status_dir.mkdir()
        started = time.time()
        run_parameters = {**(parameters or {}), "data_fingerprint": expected_fingerprint,
                          "trigger_reason": trigger_reason}
        with store_built_ahead(tracking_uri, warm, run_dir):
            outcome = _run_pipeline(home_dir, run_dir, status_dir, data_uri, config, tracking_uri, trigger, verbosity,
                                    warm, run_parameters, runner, image or config.kubernetes.image)
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
    runner: str = "subprocess",
    image: str = "",
) -> str | None:
    """Run the KFP pipeline with the local runner; its logs go to run_dir/pipeline.log."""
    kfp_without_its_client()
    from kfp import local

    from ctpipe.components.lib.tracking.retry import unreachable
    from ctpipe.pipelines.continuous_training import build_pipeline, step_names

    caching = config.pipeline.caching
    # Compiled with the resolved config as its own, as a cluster pipeline is: the run form's defaults are
    # this config's values and an empty config_json means it.
    pipeline = build_pipeline(None, default_config_json=config.to_json(), caching=caching)
    previous = {name: os.environ.get(name) for name in (STATUS_DIR_ENV, HASH_CACHE_ENV)}
    os.environ[STATUS_DIR_ENV] = str(status_dir.resolve())
    # prepare_run hashes the data through the home's cache, the watcher's: each file is hashed once for both.
    os.environ[HASH_CACHE_ENV] = str(home_cache_dir(home).resolve())
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    error = None
    try:
        with output_to(run_dir / "pipeline.log") as terminal:
            if verbosity >= 0:
                terminal.write(f"ctpipe: running the pipeline locally; logs: {run_dir / 'pipeline.log'}\n")
            down = unreachable(tracking_uri)
            if down:  # said now: the steps' retries log to pipeline.log, and would be silent here for minutes
                terminal.write(f"ctpipe: MLflow at {redact_uri(tracking_uri)} does not answer ({down}); each step retries "
                               f"for up to {config.registry.retry_budget_seconds:g} s (registry.retry_budget_seconds) "
                               "before it fails\n")
            with (
                sigterm_stops_the_steps(warm),
                StepProgress(status_dir, terminal, verbosity, log_path=run_dir / "pipeline.log", steps=step_names(config)),
                _steps_start_warm(warm),
                step_output_decoded_leniently(),
                log_without_colour(),
                no_docker_runner_warning(),
                cache_hits_recorded(status_dir),
                _kfp_runner(runner, pipeline, image, home, data_uri, status_dir, tracking_uri, run_dir.name) as kfp_runner,
            ):
                local.init(
                    kfp_runner,
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
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return error


@contextlib.contextmanager
def store_built_ahead(tracking_uri: str, warm: WarmServer | None, run_dir: Path) -> Iterator[subprocess.Popen | None]:
    """Build a new local MLflow store now, in a process forked from the warm-start server once it has imported
    MLflow, while this process compiles the pipeline and the first step starts and checks the config and the data:
    the schema's build then overlaps work that must happen anyway, instead of heading prepare_run's MLflow set-up.
    Whoever comes first builds the store, once, under its directory's lock (``tracking/sqlite_store.py``): the
    first step waits for this build if it is still going, and builds the store itself if this one failed (its
    error is kept in ``store_setup.log`` of the run). Nothing to do without a server, or for an existing or
    remote store."""
    from ctpipe.components.lib.tracking.sqlite_store import sqlite_path

    path = sqlite_path(tracking_uri)
    if warm is None or path is None or path.exists():
        yield None
        return
    builder = subprocess.Popen([*client_prefix(), "-m", "ctpipe.components.lib.tracking.sqlite_store", tracking_uri],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield builder
    finally:
        if builder.poll() is None:  # the run ended first (interrupted): the build is not needed any more
            builder.terminate()
        _, err = builder.communicate()
        if builder.returncode not in (0, -signal.SIGTERM, 128 + signal.SIGTERM):
            atomic_write_text(run_dir / "store_setup.log", err.decode(errors="replace"))


def _kfp_runner(runner: str, pipeline: Any, image: str, home: Path, data_uri: str, status_dir: Path,
                tracking_uri: str, run_id: str) -> contextlib.AbstractContextManager:
    """KFP's runner for the steps: this machine's processes, or the image's containers."""
    if runner == "container":
        from ctpipe.pipelines.local.container_runner import steps_in_containers

        return steps_in_containers(pipeline, image=image, home=home.resolve(),
                                   pipeline_root=(home / "pipeline_root").resolve(), data_uri=data_uri,
                                   status_dir=status_dir.resolve(),
                                   tracking_uri=tracking_uri, run_id=run_id)
    from kfp import local

    return contextlib.nullcontext(local.SubprocessRunner(use_venv=False))


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
    if config.tune.trials > 0:  # a space that makes an invalid config, named before any step runs
        from ctpipe.components.steps.tune.space import plan_search

        plan_search(config)


def _new_run_dir(home: Path) -> Path:
    """A new folder of its own for this run under HOME/runs (UTC time and pid)."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = home / "runs" / f"{stamp}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir
