"""The TEST-ONLY fault hook of a pipeline step: ``CTPIPE_TEST_STEP_FAULT`` makes one step meet a full disk.

``disk_full@STEP`` (e.g. ``disk_full@register``): while step STEP runs and records its outcome, every write
through Python's ``open`` (the project's own files, MLflow's staging, ``torch.save``) fails with ENOSPC after
the file is created, as on a full disk (the file exists, its bytes never arrive). It serves the tests of
``components/lib/kfp_support.py`` and the end-to-end run; it is never part of a user config, and unset it costs
nothing. The worker's own hook is ``components/engine/faults.py``.
"""

from __future__ import annotations

import builtins
import errno
import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STEP_FAULT_ENV = "CTPIPE_TEST_STEP_FAULT"
_WRITE_MODES = set("wax+")


class _FullDiskFile:
    """A file opened for writing on a full disk: created, but every write fails."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    writelines = write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handle, name)

    def __enter__(self) -> _FullDiskFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.close()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._handle)


@contextmanager
def injected_step_fault(step: str) -> Iterator[None]:
    """Inside the block, the fault ``CTPIPE_TEST_STEP_FAULT`` names for ``step``, if any."""
    kind, _, target = os.environ.get(STEP_FAULT_ENV, "").partition("@")
    if kind != "disk_full" or target != step:
        yield
        return
    real_open = builtins.open

    def full_disk_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        handle = real_open(file, mode, *args, **kwargs)
        return _FullDiskFile(handle) if _WRITE_MODES & set(mode) else handle

    builtins.open = io.open = full_disk_open
    try:
        yield
    finally:
        builtins.open = io.open = real_open
