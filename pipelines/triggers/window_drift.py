"""The drift of the watcher's newest window: the task's drift columns beside the rows, then the statistics.

    report, note = window_drift(state, reference, config, champion, reports_dir)   # cached per window

The statistics are a library (``components/lib/drift/``); what is the watcher's is here: which rows (the
newest ``watch.window_partitions``), the task's own per-row drift columns and histograms, and the reports
(JSON and HTML, ``report.py``) cached per window, champion and thresholds. When to start a run is watch.py's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ctpipe.components.lib.config import Config, WatchConfig
from ctpipe.pipelines.triggers.champion import Champion
from ctpipe.pipelines.triggers.new_data import DataState

if TYPE_CHECKING:
    from ctpipe.components.lib.drift.feature_drift import DriftReport


def window_drift(
    state: DataState, reference: dict[str, Any], config: Config, champion: Champion, reports_dir: Path
) -> tuple[dict[str, Any] | None, str]:
    """The drift report of the newest window as a dict (from cache when unchanged), and a note."""
    from ctpipe.components.lib.data.files import fingerprint_files

    window = state.window(config.watch.window_partitions, config.watch.window_days)
    thresholds = json.dumps(asdict(config.watch), sort_keys=True)
    key = hashlib.sha256(f"{fingerprint_files(window)}|{champion.version}|{thresholds}".encode()).hexdigest()[:20]
    json_path, html_path = reports_dir / f"drift-{key}.json", reports_dir / f"drift-{key}.html"
    if json_path.exists() and html_path.exists():
        return json.loads(json_path.read_text()) | {"json_path": str(json_path), "html_path": str(html_path)}, "cached"
    from ctpipe.components.lib.data.snapshot import read_data
    from ctpipe.pipelines.triggers.report import write_drift_report

    frame = read_data(state.data_uri, window)
    if len(frame) < config.watch.min_rows:
        return None, f"drift not judged: the newest window has {len(frame)} rows (< watch.min_rows={config.watch.min_rows})"
    partitions = sorted({f.path.rsplit("/", 1)[0] for f in window})
    report = judge_window(frame, reference, config, window=partitions, champion_version=champion.version)
    write_drift_report(report, json_path, html_path)
    return report.to_dict() | {"json_path": str(json_path), "html_path": str(html_path)}, "computed"


def judge_window(
    frame,
    reference: dict[str, Any],
    config: Config,
    *,
    watch: WatchConfig | None = None,
    window: list[str] | None = None,
    champion_version: str | None = None,
) -> DriftReport:
    """The drift report of ``frame`` against ``reference``: the task's per-row drift columns and histograms
    (``Task.drift_columns``, ``Task.drift_histograms``) beside its rows, judged by ``compute_drift`` under
    ``watch`` (default ``config.watch``)."""
    from ctpipe.components.lib.drift.feature_drift import compute_drift

    task, _ = _task_and_schema(reference, config)
    histograms = task_drift_histograms(frame, reference, config)
    # The columns judged jointly as one profile are the task's to say (its spec's ``profile.joint_profile``).
    return compute_drift(with_task_drift_columns(frame, reference, config), reference, watch or config.watch,
                         window=window, champion_version=champion_version, histograms=histograms,
                         profile_shares=task.profile.joint_profile)


def _task_and_schema(reference: dict[str, Any], config: Config):
    from ctpipe.components.lib.data.snapshot import Schema
    from ctpipe.components.tasks import label_column, load_task

    task = load_task(config.task)
    schema = Schema(label=label_column(task, config.data), key=config.data.key,
                    numeric=list(reference.get("numeric") or {}), categorical=list(reference.get("categorical") or {}),
                    classes=[], text_column=config.data.text_column)
    return task, schema.with_task_columns([c for c in task.profile.own_columns(schema) if c in schema.features])


def with_task_drift_columns(frame, reference: dict[str, Any], config: Config):
    """The window's rows plus the task's per-row drift statistics (``Task.drift_columns``), which the
    reference holds as numeric columns."""
    import pandas as pd

    task, schema = _task_and_schema(reference, config)
    derived = task.profile.drift_columns(frame, schema)
    return pd.concat([frame, derived], axis=1) if len(derived.columns) else frame


def task_drift_histograms(frame, reference: dict[str, Any], config: Config) -> dict[str, Any]:
    """The window's per-row counts of the reference's ``distributions`` (``Task.drift_histograms``)."""
    if not reference.get("distributions"):
        return {}
    task, schema = _task_and_schema(reference, config)
    return task.profile.drift_histograms(frame, schema)
