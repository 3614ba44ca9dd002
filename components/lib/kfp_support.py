"""What every KFP component adapter shares: the project image and step status records.

Adapters import this module inside their bodies (KFP runs the body in a fresh interpreter on a
cluster; a local run forks it from its warm-start server, ``ctpipe.components.lib.warm_start``). A step record
carries the step's time split (``timing``, from ``ctpipe.components.lib.timing.step_timing``), whether it started
warm, the heavy libraries its process loaded (cold starts only) and its slowest imports; a step process
that passed exits without the interpreter's teardown.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text, overwrite_in_place
from ctpipe.components.lib.hooks import StepHooks, load_hooks

# The project image; `ctpipe compile --image` rewrites it in the compiled spec.
COMPONENT_IMAGE = "ghcr.io/ctpipe/ctpipe:0.1.0"

# Set by the local runner (`ctpipe run`) only: where steps record their status for the summary.
STATUS_DIR_ENV = "CTPIPE_STATUS_DIR"


class StepRecord:
    """A step's outcome, filled in by the adapter and written when the step ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.result: dict[str, Any] = {}
        # Seconds inside the step that are orchestration, not its own work (launched processes' start-up,
        # MLflow set-up); the adapter fills them in.
        self.setup_seconds = 0.0


def _write_status(name: str, payload: dict[str, Any]) -> None:
    status_dir = os.environ.get(STATUS_DIR_ENV)
    if not status_dir:
        return
    path = Path(status_dir) / f"{name}.json"
    try:
        atomic_write_text(path, json.dumps(payload, indent=2, default=str))
    except OSError as err:
        if payload.get("status") == "running" or not path.is_file():
            raise
        # A full disk: the record must not keep saying "running". Its own blocks hold the short outcome.
        short = {k: v for k, v in payload.items() if k not in ("traceback", "timing", "result")}
        try:
            overwrite_in_place(path, json.dumps(short, default=str))
        except OSError:
            print(f"ctpipe: the {name} step could not record its outcome in '{path}': {err}", file=sys.stderr)


def in_kfp_executor() -> bool:
    """Whether this process is a KFP lightweight component's executor (``python -m kfp.dsl.executor_main``)."""
    return os.environ.get("_KFP_RUNTIME") == "true" and Path(sys.argv[0]).name == "executor_main.py"


def _exit_without_teardown(passed: list[bool]) -> None:
    """At the exit of a step process whose step passed, skip the interpreter's teardown.

    Tearing down an interpreter that loaded torch, MLflow or Great Expectations costs 2-3 s (measured on
    the loaded 2-core machine; ~0.1 s with this) between every two steps. Registered when the step
    starts, so the libraries' own exit handlers, registered later, run first; the KFP executor has
    written the step's outputs by then. An uncaught error after the step (``sys.last_value``) exits as
    Python would, with its own code.
    """
    if not passed or getattr(sys, "last_value", None) is not None or getattr(sys, "last_exc", None) is not None:
        return
    from ctpipe.components.lib.processes import exit_without_teardown

    exit_without_teardown(0)


def warm_started() -> bool:
    """Whether this process was forked from the warm-start server of a local run (``ctpipe.components.lib.warm_start``)."""
    return bool(getattr(sys.modules.get("ctpipe.components.lib.warm_start.server"), "IN_CHILD", False))


@contextmanager
def step_status(name: str, *, mlflow_run: tuple[str, str] | None = None, ends_run: bool = False) -> Iterator[StepRecord]:
    """Record the step as running, then passed (with its result) or failed (with the error).

    ``mlflow_run`` (tracking URI, run id): the pipeline run's MLflow run, which a failing step ends as FAILED
    (KILLED when interrupted) and the last step (``ends_run``) ends as FINISHED when it passes.
    """
    from ctpipe.components.lib.errors import UserError, machine_error_message
    from ctpipe.components.lib.timing import (
        import_clock,
        loaded_heavy_libraries,
        process_start_time,
        step_timing,
    )

    record = StepRecord(name)
    started = time.time()
    process_start = process_start_time()
    passed: list[bool] = []
    if in_kfp_executor():
        atexit.register(_exit_without_teardown, passed)
    _write_status(name, {"step": name, "status": "running", "started": started})

    def timing() -> dict[str, Any]:
        split = step_timing(
            process_start=process_start,
            started=started,
            ended=time.time(),
            import_seconds=imports.seconds,
            setup_seconds=record.setup_seconds,
        )
        if warm_started():  # its libraries were loaded by the server before the step began
            return {**split, "warm_start": True, "libraries": None, "slowest_imports": imports.slowest()}
        return {**split, "warm_start": False, "libraries": loaded_heavy_libraries(), "slowest_imports": imports.slowest()}

    # The step's hooks (none unless CTPIPE_HOOKS names some: lib/hooks.py) hold until the outcome is recorded:
    # a test's full disk must meet the status record too, as a real one would.
    hooks = ExitStack()
    hooks.enter_context(load_hooks(StepHooks).running(name))
    try:
        with import_clock() as imports:
            yield record
    except BaseException as err:
        user_error = isinstance(err, UserError)
        # A full or failing disk: one line naming the step, the path and what happened (retried, not a user error).
        machine = machine_error_message(name, err) if isinstance(err, OSError) else None
        if machine:
            print(f"ctpipe: {machine}", file=sys.stderr, flush=True)
        if mlflow_run:
            from ctpipe.components.lib.tracking import RetryPolicy, end_linked_pipeline_runs, end_pipeline_run

            interrupted = isinstance(err, KeyboardInterrupt | SystemExit)
            # One quick retry: a failing step must not wait long on an MLflow that may be the reason it failed.
            end_pipeline_run(*mlflow_run, "KILLED" if interrupted else "FAILED",
                             retry=RetryPolicy(retries=1, backoff_seconds=0.5, max_backoff_seconds=0.5))
            # A cached step logs to the run of its content (components/lib/tracking/training_runs.py): the
            # pipeline runs waiting on it failed too.
            end_linked_pipeline_runs(*mlflow_run, "KILLED" if interrupted else "FAILED")
        _write_status(
            name,
            {
                "step": name,
                "status": "failed",
                "started": started,
                "seconds": round(time.time() - started, 3),
                "timing": timing(),
                "error": machine or str(err) or type(err).__name__,
                "error_type": type(err).__name__,
                "user_error": user_error,
                "traceback": None if user_error else traceback.format_exc(),
                "result": record.result,
            },
        )
        raise
    finally:
        hooks.close()
    if ends_run and mlflow_run:
        from ctpipe.components.lib.tracking import end_pipeline_run, finish_training_run_of

        end_pipeline_run(*mlflow_run, "FINISHED")
        finish_training_run_of(*mlflow_run)  # the run its cached steps logged to, when it names one
    _write_status(
        name,
        {
            "step": name,
            "status": "passed",
            "started": started,
            "seconds": round(time.time() - started, 3),
            "timing": timing(),
            "result": record.result,
        },
    )
    passed.append(True)
