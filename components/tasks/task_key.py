"""A task's own key column (``Task.key_column``, e.g. causal_lm's ``doc_id``) as the run's split key when the
data has it and the user set none: ``ctpipe run --data TEXT --task causal_lm`` splits by document, as the
task's demo run does, instead of profiling the identifier as a categorical feature.

    config = with_task_key(config, data_uri, config_path, overrides)   # the local run, after --data
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.lib.config import Config


def data_columns(data_uri: str) -> list[str]:
    """The column names of the first data file under ``data_uri`` (its header only: no rows are read)."""
    import pandas as pd
    import pyarrow.parquet as pq

    from ctpipe.components.lib.data.files import scan_data_files

    fs, listed = scan_data_files(data_uri)
    if not listed:
        return []
    first = listed[0]
    with fs.open(first.full_path, "rb") as handle:
        if first.full_path.lower().endswith(".csv"):
            return [str(c) for c in pd.read_csv(handle, nrows=0).columns]
        return list(pq.read_schema(handle).names)


def task_key_setting(task: Any, config: Config, data_uri: str) -> list[str]:
    """``["data.key=COLUMN"]`` when the task declares a key column that the data has and ``data.key`` is
    unset; else none (the user's key, or a null key they chose, is never replaced)."""
    column = getattr(task, "key_column", None)
    if not column or config.data.key is not None:
        return []
    return [f"data.key={column}"] if column in data_columns(data_uri) else []


def with_task_key(config: Config, data_uri: str, config_path: str | None, overrides: list[str]) -> Config:
    """``config`` with the task's key column as a default under the user's config file and ``--set``."""
    from ctpipe.components.tasks import load_task
    from ctpipe.components.tasks.run_config import load_run_config

    setting = task_key_setting(load_task(config.task), config, data_uri)
    # Under the config file and --set: a data.key=null chosen there stays null.
    return load_run_config(config_path, overrides, defaults=[setting]) if setting else config
