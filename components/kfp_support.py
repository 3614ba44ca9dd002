"""What every KFP component adapter shares: the project image and step status records.

Adapters import this module inside their bodies (KFP runs the body in a fresh interpreter).
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The project image; `ctpipe compile --image` rewrites it in the compiled spec.
COMPONENT_IMAGE = "ghcr.io/ctpipe/ctpipe:0.1.0"

# Set by the local runner (`ctpipe run`) only: where steps record their status for the summary.
STATUS_DIR_ENV = "CTPIPE_STATUS_DIR"


class StepRecord:
    """A step's outcome, filled in by the adapter and written when the step ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.result: dict[str, Any] = {}


def _write_status(name: str, payload: dict[str, Any]) -> None:
    status_dir = os.environ.get(STATUS_DIR_ENV)
    if not status_dir:
        return
    path = Path(status_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str))
    tmp.replace(path)


@contextmanager
def step_status(name: str) -> Iterator[StepRecord]:
    """Record the step as running, then passed (with its result) or failed (with the error)."""
    from components.errors import UserError

    record = StepRecord(name)
    started = time.time()
    _write_status(name, {"step": name, "status": "running", "started": started})
    try:
        yield record
    except BaseException as err:
        user_error = isinstance(err, UserError)
        _write_status(
            name,
            {
                "step": name,
                "status": "failed",
                "started": started,
                "seconds": round(time.time() - started, 3),
                "error": str(err) or type(err).__name__,
                "error_type": type(err).__name__,
                "user_error": user_error,
                "traceback": None if user_error else traceback.format_exc(),
                "result": record.result,
            },
        )
        raise
    _write_status(
        name,
        {
            "step": name,
            "status": "passed",
            "started": started,
            "seconds": round(time.time() - started, 3),
            "result": record.result,
        },
    )
