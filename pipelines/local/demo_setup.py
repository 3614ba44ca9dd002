"""The demo data of ``ctpipe run`` without ``--data``: written once under the ctpipe home, with its settings.

    data_uri, config = demo_data_and_config(home, config, config_path, overrides)
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ctpipe.components.lib.config import Config
from ctpipe.components.tasks.run_config import load_run_config

DEMO_KEY_COLUMN = "customer_id"


def demo_data_and_config(home: Path, config: Config, config_path: str | None, overrides: list[str]) -> tuple[str, Config]:
    """The task's demo data under the home, and the config with the demo's settings under the user's own:
    the config file and ``--set`` win over them."""
    data_uri, demo_settings = ensure_demo_data_for(home, config)
    if not demo_settings:
        return data_uri, config
    return data_uri, load_run_config(config_path, overrides, defaults=[demo_settings])


def ensure_demo_data_for(home: Path, config) -> tuple[str, list[str]]:
    """The configured task's demo data under the home (its ``write_demo_data``, else the tabular demo)
    and the config settings that go with it (the key column; the task's ``demo_settings``), which
    ``demo_data_and_config`` puts under the user's own."""
    from ctpipe.components.tasks import load_task

    task = load_task(config.task)  # complete: the optional parts have their defaults (protocol.TaskBase)
    if task.write_demo_data is None:
        return ensure_demo_data(home), [f"data.key={DEMO_KEY_COLUMN}"]
    root = home / f"data-{task.name}"
    _write_whole(root, task.write_demo_data)
    return str(root.resolve()), list(task.demo_settings)


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
