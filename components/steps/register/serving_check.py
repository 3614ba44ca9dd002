"""Infra validation before promotion: load the logged model the way a server does and check what it serves.

    check = check_serving(model_dir, rows, expected)   # expected: what the evaluated export serves for rows

TFX's InfraValidator loads a candidate in a serving-like environment and queries it before the Pusher may
push it. Here the logged pyfunc is loaded in a clean interpreter (``python -I``: no PYTHONPATH, no user site,
a scratch working folder) through ``mlflow.pyfunc`` and nothing of ctpipe or the task on the import path
but the code the model ships (an import hook refuses those packages from anywhere else, so an installed
or editable ctpipe cannot stand in for a missing file; an interpreter that has imported any of them already
is refused). It scores the rows, and its output must equal what the evaluated export serves for them in the
pipeline's process (``ExportedModel.serve``: the export and code evaluation scored). A failure keeps the
champion: registration marks the version not servable.

The clean interpreter is a standby (``components/lib/warm_start/standby.py``) when one is up: a ``python -I``
that imported MLflow, pandas and torch ahead (a local run starts one while its first steps run; registration
starts its own before it builds the pyfunc, ``serving_standby``), never ctpipe, and serves this one check.
Else a fresh ``python -I`` pays those imports (~3 s of CPU) inside the check.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ctpipe.components.lib.warm_start import standby

# Test rows the candidate serves (a language model also generates a continuation for each).
SERVING_CHECK_ROWS = 16
# A fresh interpreter imports mlflow, pandas and torch (~5 s idle, more on a loaded machine).
SERVING_CHECK_TIMEOUT_SECONDS = 300.0
# Served numbers may differ in the last bits between processes (thread counts change kernel blocking).
RTOL, ATOL = 1e-5, 1e-6

# The probe's exit code when its interpreter already holds a shipped package: it is not clean, run it fresh.
NOT_CLEAN = 75
# Run as `python -I -c PROBE model_dir rows.parquet out.parquet pkg[,pkg...]`.
PROBE = r"""
import importlib.machinery, sys
model_dir, rows_path, out_path, shipped = sys.argv[1:5]
code_dir = model_dir + "/code"
held = sorted(m for m in sys.modules if m.partition(".")[0] in shipped.split(","))
if held:
    print(f"this interpreter already imported {held[:3]}: not a clean one", file=sys.stderr)
    sys.exit(NOT_CLEAN)

class OnlyShippedCode:
    # ctpipe's and the task's packages come from the model's code folder or not at all.
    def find_spec(self, name, path=None, target=None):
        if path is None and name in shipped.split(","):
            spec = importlib.machinery.PathFinder.find_spec(name, [code_dir])
            if spec is None:
                raise ModuleNotFoundError(f"No module named {name!r} in the model's code folder", name=name)
            return spec
        return None

sys.meta_path.insert(0, OnlyShippedCode())
import mlflow.pyfunc
import pandas as pd
model = mlflow.pyfunc.load_model(model_dir)
pd.DataFrame(model.predict(pd.read_parquet(rows_path))).to_parquet(out_path)
""".replace("NOT_CLEAN", str(NOT_CLEAN))


@dataclass(frozen=True)
class ServingCheck:
    """Whether the logged model served the rows as evaluated, and why not."""

    servable: bool
    reason: str
    seconds: float


def check_serving(model_dir: Path, rows: pd.DataFrame, expected: pd.DataFrame, shipped: list[str],
                  *, timeout: float = SERVING_CHECK_TIMEOUT_SECONDS, warm: standby.Standby | None = None) -> ServingCheck:
    """Serve ``rows`` from ``model_dir`` in a clean interpreter (only ``shipped`` packages from the model's code; the
    standby ``warm`` when it answers) and compare with ``expected``."""
    started = time.perf_counter()
    try:
        served, where = serve_in_clean_process(model_dir, rows, shipped, timeout=timeout, warm=warm)
    except ServingFailed as err:
        return ServingCheck(False, f"the logged model does not serve in a clean process: {err}",
                            time.perf_counter() - started)
    difference = compare_served(served, expected)
    seconds = time.perf_counter() - started
    if difference:
        return ServingCheck(False, f"served predictions differ from the evaluated ones: {difference}", seconds)
    return ServingCheck(True, f"served {len(rows)} test rows in a clean process ({where}) as evaluated", seconds)


class ServingFailed(RuntimeError):
    """The clean process could not load the model or score the rows; the message holds its error."""


def serve_in_clean_process(model_dir: Path, rows: pd.DataFrame, shipped: list[str], *,
                           timeout: float = SERVING_CHECK_TIMEOUT_SECONDS,
                           warm: standby.Standby | None = None) -> tuple[pd.DataFrame, str]:
    """What the pyfunc at ``model_dir`` returns for ``rows``, loaded in a clean, isolated interpreter, and which one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", standby.STANDBY_ENV)}
    env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    with tempfile.TemporaryDirectory(prefix="ctpipe-serving-check-") as scratch:
        rows_path, out_path = Path(scratch) / "rows.parquet", Path(scratch) / "served.parquet"
        stderr_path = Path(scratch) / "stderr.txt"
        rows.reset_index(drop=True).to_parquet(rows_path)
        argv = [str(Path(model_dir).resolve()), str(rows_path), str(out_path), ",".join(shipped)]
        try:
            code, where = standby.run_script(PROBE, argv, cwd=scratch, env=env, stderr_path=str(stderr_path),
                                             timeout=timeout, standby=warm)
            if code == NOT_CLEAN and warm is not None:  # the standby had imported one: a fresh interpreter, as before
                code, where = standby.run_script(PROBE, argv, cwd=scratch, env=env, stderr_path=str(stderr_path),
                                                 timeout=timeout)
        except subprocess.TimeoutExpired as err:
            raise ServingFailed(f"it did not answer within {timeout:.0f} s") from err
        if code != 0:
            raise ServingFailed(_last_error(stderr_path.read_text(errors="replace")))
        return pd.read_parquet(out_path), where


@contextmanager
def serving_standby() -> Iterator[standby.Standby]:
    """A standby for this step's serving check, held from now to the check: the run's (``STANDBY_ENV``, a local run's)
    when it is ready now, else one started now, whose imports then overlap the step's work before the check.
    Released or stopped when the block ends."""
    running = os.environ.get(standby.STANDBY_ENV)
    if running:
        ready = standby.Standby(running)
        if ready.reserve():
            try:
                yield ready
            finally:
                ready.release()
            return
    with tempfile.TemporaryDirectory(prefix="ctpipe-standby-") as tmp:
        socket_path = str(Path(tmp) / "standby.sock")
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["MLFLOW_DISABLE_TELEMETRY"] = "true"
        own = standby.Standby(socket_path, standby.start(socket_path, env=env))
        try:
            yield own
        finally:
            own.release()
            own.process.kill()
            own.process.wait()


def _last_error(stderr: str) -> str:
    """The exception line of a traceback (the last line that names an error), else the tail of stderr."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":")[0] or "Exception" in line.split(":")[0]]
    return (errors[-1] if errors else " | ".join(lines[-3:]))[:2000] or "it exited with an error and no message"


def compare_served(served: pd.DataFrame, expected: pd.DataFrame) -> str | None:
    """None when ``served`` equals ``expected`` (numbers within RTOL/ATOL); else what differs, in one line."""
    served, expected = served.reset_index(drop=True), expected.reset_index(drop=True)
    if [str(c) for c in served.columns] != [str(c) for c in expected.columns]:
        return f"columns {[str(c) for c in served.columns]}, evaluated {[str(c) for c in expected.columns]}"
    if len(served) != len(expected):
        return f"{len(served)} rows served for {len(expected)} evaluated"
    for position, column in enumerate(expected.columns):
        got, want = served.iloc[:, position], expected.iloc[:, position]
        if pd.api.types.is_numeric_dtype(want) and pd.api.types.is_numeric_dtype(got):
            a, b = got.to_numpy(np.float64), want.to_numpy(np.float64)
            bad = ~np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True)
            if bad.any():
                gap = float(np.nanmax(np.abs(a - b)[bad]))
                return f"column '{column}' differs on {int(bad.sum())} of {len(b)} rows (largest difference {gap:.3g})"
        else:
            bad = got.astype(str).to_numpy() != want.astype(str).to_numpy()
            if bad.any():
                first = int(np.flatnonzero(bad)[0])
                return (f"column '{column}' differs on {int(bad.sum())} of {len(want)} rows (row {first}: served "
                        f"{got.iloc[first]!r}, evaluated {want.iloc[first]!r})")
    return None
