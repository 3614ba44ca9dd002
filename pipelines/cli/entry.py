"""The ``ctpipe`` console script: for ``ctpipe run``, the warm-start server is started first, then the CLI
(``main.py``) imports its commands and runs. The server's imports are what the first step waits for; begun
before the CLI's own start-up (~0.15 s of imports), they overlap it instead of following it."""

from __future__ import annotations

import sys


def entry() -> None:
    from ctpipe.components.lib.warm_start import start_early

    start_early(sys.argv[1:])
    from ctpipe.pipelines.cli.main import entry as run_command

    run_command()
