"""``log_step``: record one step's results on the pipeline run's MLflow run, retried as one unit.

Every step (run setup, validation, sanity, evaluation, registration) logs through this one call, so
each gets the same bounded retries on a server that is down, one batched write for its params, metrics
and tags (each separate ``log_metric`` is its own database transaction), and its files in one upload.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text, naming_path
from ctpipe.components.lib.tracking.retry import RetryPolicy, bounded_mlflow_http

# MLflow's limits: a param value's length, and params per log_batch request.
PARAM_VALUE_MAX = 6000
PARAMS_PER_BATCH = 100


def flatten_params(values: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config values as flat ``section.field`` params (MLflow params are strings)."""
    out: dict[str, str] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten_params(value, name + "."))
        else:
            out[name] = str(value)[:PARAM_VALUE_MAX]
    return out


def log_step(
    tracking_uri: str,
    run_id: str,
    step: str,
    *,
    metrics: Mapping[str, float | None] | None = None,
    tags: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    files: Mapping[str, str | Path] | None = None,
    documents: Mapping[str, Any] | None = None,
    retry: RetryPolicy | None = None,
) -> bool:
    """Log ``step``'s metrics, tags, files and JSON documents on run ``run_id``; False when there is no run.

    Args:
        tracking_uri: The MLflow tracking URI; empty means "not tracked" (nothing is logged).
        run_id: The pipeline run's MLflow run; empty means "not tracked".
        step: The step's name, for the error message when MLflow stays unavailable.
        metrics: Name -> value, logged at step 0; None, NaN and Inf are left out (MLflow's UI cannot show them).
        tags: Name -> text.
        params: Name -> text (e.g. ``flatten_params(config.to_dict())``). MLflow params are immutable: log
            each once (a retry resending the same value is fine; another value under the same name fails).
        files: Artifact path in the run (e.g. ``"sanity/sanity.md"``) -> a local file or folder; an empty
            path or one that does not exist is left out (a report the step did not write).
        documents: Artifact path in the run -> a JSON-serialisable value, written as JSON.
        retry: Retries on transient failures; default ``RetryPolicy()``.
    """
    if not tracking_uri or not run_id:
        return False
    import mlflow
    from mlflow.entities import Metric, Param, RunTag

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    now = int(time.time() * 1000)
    metric_list = [Metric(k, float(v), now, 0) for k, v in (metrics or {}).items() if _finite(v)]
    tag_list = [RunTag(k, str(v)) for k, v in (tags or {}).items()]
    param_list = [Param(k, str(v)[:PARAM_VALUE_MAX]) for k, v in (params or {}).items()]
    present = {name: Path(p) for name, p in (files or {}).items() if p and Path(p).exists()}

    def log() -> None:
        if metric_list or tag_list or param_list:
            client.log_batch(run_id, metrics=metric_list, tags=tag_list, params=param_list[:PARAMS_PER_BATCH])
        for start in range(PARAMS_PER_BATCH, len(param_list), PARAMS_PER_BATCH):
            client.log_batch(run_id, params=param_list[start : start + PARAMS_PER_BATCH])
        if present or documents:
            with tempfile.TemporaryDirectory(prefix="ctpipe-log-") as tmp, naming_path(tmp):
                _stage(Path(tmp), present, documents or {})
                client.log_artifacts(run_id, tmp)

    with bounded_mlflow_http():
        (retry or RetryPolicy()).call(log, f"log the {step} step's results to MLflow run {run_id}")
    return True


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(float(value))


def _stage(root: Path, files: Mapping[str, Path], documents: Mapping[str, Any]) -> None:
    """Lay out ``files`` and ``documents`` under ``root`` at their artifact paths."""
    for name, source in files.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            shutil.copyfile(source, target)
    for name, value in documents.items():
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, json.dumps(value, indent=2, default=str))
