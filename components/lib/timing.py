"""Where a step's time goes: when its process started, how long it spent importing, and the split.

The step records (``ctpipe.components.lib.kfp_support.step_status``) split each step with ``step_timing``:
``process_seconds`` from its interpreter's start to the step (Python, the KFP executor, the adapter),
``import_seconds`` in imports during the step, ``setup_seconds`` inside the step that are
orchestration, not its work (the training ranks' start-up, MLflow's experiment and database set-up),
``compute_seconds`` the rest (the step's own work) and ``overhead_seconds`` all but the compute.
``benchmarks/pipeline.py`` and the run summary add them up. Standard library only: it is imported
before anything heavy.
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# Libraries that cost a second or more to import; a step should load only those it uses.
HEAVY_LIBRARIES = ("torch", "mlflow", "great_expectations", "pandas", "scipy", "sklearn", "kubernetes")


def loaded_heavy_libraries() -> list[str]:
    """The heavy libraries this process has imported so far."""
    return [name for name in HEAVY_LIBRARIES if name in sys.modules]


def step_timing(
    *, process_start: float | None, started: float, ended: float, import_seconds: float, setup_seconds: float
) -> dict[str, float | None]:
    """The step's time split: process start-up, imports, set-up inside the step, its own compute."""
    process_seconds = max(started - process_start, 0.0) if process_start is not None else None
    in_step = max(ended - started, 0.0)
    setup = min(max(setup_seconds, 0.0), in_step)
    imports = min(import_seconds, in_step - setup)
    # Rounded to the millisecond part by part, and the overhead summed from the rounded parts, so that the
    # recorded figures add up (a rounded sum can differ from the sum of the rounded parts by 1.5 ms).
    process_ms = None if process_seconds is None else round(process_seconds, 3)
    imports_ms, setup_ms = round(imports, 3), round(setup, 3)
    return {
        "process_seconds": process_ms,
        "import_seconds": imports_ms,
        "setup_seconds": setup_ms,
        "compute_seconds": round(max(in_step - imports_ms - setup_ms, 0.0), 3),
        "overhead_seconds": round((process_ms or 0.0) + imports_ms + setup_ms, 3),
    }


def process_start_time() -> float | None:
    """This process's start as a Unix time (Linux ``/proc``, 10 ms resolution); None where unknown."""
    try:
        with open("/proc/self/stat") as stat_file:
            # The command name (field 2) may hold spaces: the fields after its closing parenthesis.
            fields = stat_file.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as uptime_file:
            uptime = float(uptime_file.read().split()[0])
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return time.time() - (uptime - started_after_boot)


def interpreter_start_time(loaded_at: float, *, exec_slack: float = 1.0) -> float:
    """When this interpreter started: the process start, unless that lies more than ``exec_slack``
    seconds before ``loaded_at`` (the first moment our code ran).

    A shell runs its last command by ``exec`` (``bash -c "pip install ... && ctpipe run"``, a subshell):
    the process then started with the shell, and its start would count the shell's earlier commands as
    the CLI's start-up. Python's own start-up before ``loaded_at`` is well under a second, so past the
    slack the process is older than the interpreter and ``loaded_at`` is the better bound.
    """
    started = process_start_time()
    if started is None or loaded_at - started > exec_slack:
        return loaded_at
    return started


@dataclass
class ImportTally:
    """Wall seconds the main thread spent in ``import`` statements while the clock ran, and per module."""

    seconds: float = 0.0
    by_module: dict[str, float] = field(default_factory=dict)

    def slowest(self, n: int = 5) -> dict[str, float]:
        """The ``n`` outermost imports that took longest, in seconds (where a step's import time went)."""
        ranked = sorted(self.by_module.items(), key=lambda item: item[1], reverse=True)[:n]
        return {name: round(seconds, 3) for name, seconds in ranked}


@contextmanager
def import_clock() -> Iterator[ImportTally]:
    """Count the main thread's time in imports (outermost ``import`` statements only) until exit.

    It wraps ``builtins.__import__``, which every ``import``/``from ... import`` statement calls, also
    the lazy ones inside functions; an already-imported module costs a dictionary look-up. Imports on
    other threads are not counted: they overlap the main thread's time.
    """
    tally = ImportTally()
    original = builtins.__import__
    main = threading.main_thread()
    depth = 0

    def timed_import(*args, **kwargs):
        nonlocal depth
        if depth or threading.current_thread() is not main:
            return original(*args, **kwargs)
        depth += 1
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            took = time.perf_counter() - start
            tally.seconds += took
            name = str(args[0] if args else kwargs.get("name", ""))
            tally.by_module[name] = tally.by_module.get(name, 0.0) + took
            depth -= 1

    builtins.__import__ = timed_import
    try:
        yield tally
    finally:
        builtins.__import__ = original
