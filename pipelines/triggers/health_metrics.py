"""The health figures as MLflow metrics, for an alerting stack that reads MLflow rather than a file.

Every check writes ``HOME/watch/health.json``; this logs the same figures (``champion_age_days``,
``data_gap_days``, ``failed_runs_in_a_row``, ``alert`` as 0/1) to a run of the experiment
``<registry.experiment>-watch``, kept apart from the pipeline's runs (which ``ctpipe gc`` prunes by count). Each
point's timestamp is the check's time and its step the point's number in the run.

Bounded, since a watcher runs for a year: a point at most every ``watch.health_metrics_seconds`` (and whenever
the alert turns on or off), so MLflow is imported about once an hour rather than at every nothing-new check;
``watch.health_points_per_run`` points per run, then a new run starts and every health run but the newest two is
deleted. Where the points went is ``HOME/watch/health-metrics.json`` (written whole).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text, read_json_object
from ctpipe.components.lib.config import Config
from ctpipe.pipelines.triggers.health import Health

STATE_FILE = "health-metrics.json"
HEALTH_RUN_TAG = "ctpipe.watch_health"
KEPT_RUNS = 2
FIGURES = ("champion_age_days", "data_gap_days", "failed_runs_in_a_row")


def health_experiment(config: Config) -> str:
    return f"{config.registry.experiment}-watch"


def due(state: dict[str, Any], health: Health, every_seconds: float) -> bool:
    """A point is due when metrics are on and none was logged yet, the last is ``every_seconds`` old, or the alert
    changed since (an alert is reported at once, not up to an hour late)."""
    if every_seconds <= 0:
        return False
    if "logged_at" not in state:
        return True
    return health.checked_at - float(state["logged_at"]) >= every_seconds or bool(state.get("alert")) != health.alert


def log_health_metrics(health: Health, *, home: str | Path, tracking_uri: str, config: Config) -> str | None:
    """Log ``health`` to the health run when a point is due; the run's id, or None when nothing was logged."""
    path = Path(home) / "watch" / STATE_FILE
    state = read_json_object(path)
    if not due(state, health, config.watch.health_metrics_seconds):
        return None
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    from ctpipe.components.lib.tracking.store import ensure_experiment

    client = MlflowClient(tracking_uri=tracking_uri)
    run_id, points = state.get("run_id"), int(state.get("points", 0))
    if not run_id or points >= config.watch.health_points_per_run or not _usable(client, run_id):
        run_id, points = _new_run(client, ensure_experiment(tracking_uri, health_experiment(config)), health), 0
    values = {name: getattr(health, name) for name in FIGURES} | {"alert": float(health.alert)}
    timestamp = int(health.checked_at * 1000)
    client.log_batch(run_id, metrics=[Metric(name, float(value), timestamp, points)
                                      for name, value in values.items() if value is not None])
    atomic_write_text(path, json.dumps({"run_id": run_id, "points": points + 1, "logged_at": health.checked_at,
                                        "alert": health.alert}))
    return run_id


def _usable(client, run_id: str) -> bool:
    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except Exception:  # deleted for good, or another store: start a new run
        return False


def _new_run(client, experiment_id: str, health: Health) -> str:
    """A new health run (FINISHED at once: it holds figures, not work in progress); older ones beyond
    ``KEPT_RUNS`` are deleted, so the experiment holds at most ``KEPT_RUNS`` runs of bounded size."""
    day = dt.datetime.fromtimestamp(health.checked_at, dt.UTC).date().isoformat()
    run = client.create_run(experiment_id, run_name=f"ctpipe-watch-health-{day}", tags={HEALTH_RUN_TAG: "true"},
                            start_time=int(health.checked_at * 1000))
    client.set_terminated(run.info.run_id, end_time=int(health.checked_at * 1000))
    older = client.search_runs([experiment_id], f"tags.`{HEALTH_RUN_TAG}` = 'true'",
                               order_by=["attributes.start_time DESC"], max_results=1000)
    for stale in older[KEPT_RUNS:]:
        client.delete_run(stale.info.run_id)
    return run.info.run_id
