"""The ctpipe home of a local run or of a command that reads one: ``$CTPIPE_HOME``, else ``./.ctpipe``.

Its own module, so that a command that only reads the home's registry (``ctpipe models``, ``ctpipe gc``) does not
import the local runner (KFP, the run's terminal progress) to find it.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_home() -> Path:
    """The ctpipe home: $CTPIPE_HOME, else ./.ctpipe."""
    return Path(os.environ.get("CTPIPE_HOME") or ".ctpipe")
