"""Which steps of a ``ctpipe run`` came from KFP's local cache, recorded as the steps record themselves.

A step that KFP's local runner takes from its cache (``local.init(enable_caching=True)``, kfp 2.17) does
not run, so it writes no step record; the runner only logs ``Task <name> cache hit`` (at INFO, outside
its own logging context). While in
``cache_hits_recorded``, each such line becomes the step's record with status ``cached``, which the
progress view and the summary read like any other.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text

# kfp/local/orchestrator/task_executor.py (2.17): logging.info(f'Task {task_name} cache hit (key=...)...').
_CACHE_HIT = re.compile(r"^Task (?P<task>[\w-]+) cache hit\b")


class _CacheHitRecorder(logging.Filter):
    """A filter on the root logger (kfp.local replaces the root's handlers while it runs, not its filters):
    it lets every record through and writes a ``cached`` step record for each cache hit."""

    def __init__(self, status_dir: Path) -> None:
        super().__init__()
        self.status_dir = status_dir

    def filter(self, record: logging.LogRecord) -> bool:
        match = _CACHE_HIT.match(str(record.msg))
        if match is not None:
            step = match["task"].replace("-", "_")  # the task of component validate_data is validate-data
            payload = {"step": step, "status": "cached", "started": time.time(), "seconds": 0.0}
            atomic_write_text(self.status_dir / f"{step}.json", json.dumps(payload))
        return True


@contextlib.contextmanager
def cache_hits_recorded(status_dir: Path) -> Iterator[None]:
    """While in this block, a step taken from the local cache gets a ``cached`` record in ``status_dir``."""
    recorder = _CacheHitRecorder(status_dir)
    root = logging.getLogger()
    level = root.level
    # kfp logs the hit outside its own logging context, where the root's WARNING would drop it before any
    # filter; outside that context the root has no handler, and logging's last resort prints WARNING and up.
    root.setLevel(min(level, logging.INFO) if level else logging.INFO)
    root.addFilter(recorder)
    try:
        yield
    finally:
        root.removeFilter(recorder)
        root.setLevel(level)
