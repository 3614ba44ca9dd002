"""The demo data of ``ctpipe run`` without ``--data``: written once under the ctpipe home.

    data_uri = ensure_demo_data_for(home, config)    # then resolve_config(..., data_uri=data_uri, demo=True)

The settings that go with the demo data (its key column, a task's own ``demo_settings``) are a layer of
the run's config (``ctpipe.components.run_config``: the ``demo`` layer).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ctpipe.components.lib.config import Config


def ensure_demo_data_for(home: Path, config: Config) -> str:
    """The configured task's demo data under the home: its ``write_demo_data``, else the tabular demo."""
    from ctpipe.components.tasks import load_task

    task = load_task(config.task)  # complete: the optional parts have their defaults (protocol.TaskBase)
    if task.demo is None:
        return ensure_demo_data(home)
    root = home / f"data-{task.name}"
    _write_whole(root, task.demo.write_data)
    return str(root.resolve())


def ensure_demo_data(home: Path) -> str:
    """Generate the demo dataset under the home once; return its path."""
    from ctpipe.components.lib.data.demo import write_demo_data

    root = home / "data"
    _write_whole(root, write_demo_data)
    return str(root.resolve())


def _write_whole(root: Path, write) -> None:
    """Unless ``root`` has demo partitions, ``write(folder)`` them into a folder of its own beside it and
    move that into place: a run killed while writing, or a run started beside it, never leaves or sees
    the first days only (the next run would have trained on them)."""
    if any(root.glob("date=*/part-0.parquet")):
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent, prefix=f".{root.name}-") as tmp:
        staged = Path(tmp) / root.name
        write(str(staged))
        try:
            staged.rename(root)  # replaces an empty folder; fails when another run has put its own
        except OSError:
            if not any(root.glob("date=*/part-0.parquet")):
                raise
