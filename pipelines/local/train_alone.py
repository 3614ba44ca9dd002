"""Training on its own, outside the pipeline: snapshot a data root, train (resuming), summarise.

``ctpipe train --data URI --out DIR`` calls ``train_standalone``: the snapshot goes to DIR/snapshot with
the pipeline's split logic, checkpoints to DIR/checkpoints, the summary to DIR/train_summary.json.

A runner, as ``ctpipe run`` is: it runs the train step's plain function (``train_model`` with the local
launcher) on this machine without KFP, so the step folder stays the step's alone and the CLI imports no step.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ctpipe.components.engine.checkpoint_index import RESUME_TRAIN_KEYS
from ctpipe.components.engine.checkpointing import (
    identity_differences,
    latest_complete,
    read_meta,
    split_identity,
    write_json_atomic,
)
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.batches import count_rows
from ctpipe.components.lib.data.scan import scan, write_snapshot_stream
from ctpipe.components.lib.data.snapshot import (
    SPLIT_COLUMN,
    Snapshot,
    assign_splits,
    fingerprint_files,
    infer_schema,
    list_data_files,
    load_snapshot,
    read_data,
    split_keys,
    write_snapshot,
)
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.data.window import TrainWindow
from ctpipe.components.lib.errors import UserError
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.train.launchers.local import LocalLauncher

SUMMARY_FILE = "train_summary.json"


def build_snapshot(data_uri: str, config: Config, out_dir: str | Path) -> Snapshot:
    """Read, split (stable salted hash of the key, as in validation) and write a snapshot with the task's
    statistics."""
    from ctpipe.components.tasks import label_column, load_task

    task = load_task(config.task)
    files = list_data_files(data_uri)
    total = count_rows(data_uri, files, config.data.format)
    if total is not None and total > config.validation.in_memory_rows:
        return _build_snapshot_streamed(data_uri, config, out_dir, files, task)
    data = read_data(data_uri, files, config.data.format)
    schema = infer_schema(
        data,
        label=label_column(task, config.data),
        key=config.data.key,
        features=list(config.data.features),
        categorical=list(config.data.categorical),
        text_column=config.data.text_column,
    )
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    splits = assign_splits(
        split_keys(data, schema),
        val_fraction=config.data.val_fraction,
        test_fraction=config.data.test_fraction,
        salt=config.data.split_salt,
    )
    frame = data.drop(columns=[SPLIT_COLUMN], errors="ignore")
    return write_snapshot(
        out_dir, frame, splits, schema, data_uri=data_uri, files=files, fingerprint=fingerprint_files(files),
        window=TrainWindow.from_config(config.data), task=task,
    )


def _build_snapshot_streamed(data_uri: str, config: Config, out_dir: str | Path, files: list, task: Any) -> Snapshot:
    """``build_snapshot`` for data above validation.in_memory_rows: schema from a sample, rows in two passes."""
    from ctpipe.components.tasks import label_column

    label = label_column(task, config.data)
    scanned = scan(data_uri, files, config.data.format, label=label, key=config.data.key,
                   features=list(config.data.features), settings=SplitSettings.from_config(config.data),
                   sample_rows=config.validation.sample_rows)
    schema = infer_schema(scanned.sample, label=label, key=config.data.key, features=list(config.data.features),
                          categorical=list(config.data.categorical), text_column=config.data.text_column)
    schema = schema.with_task_columns(task.profile.own_columns(schema))
    return write_snapshot_stream(str(out_dir), data_uri, files, config.data.format, scanned, schema,
                                 fingerprint=fingerprint_files(files), window=TrainWindow.from_config(config.data),
                                 task=task)


def _snapshot_for_resume(data_uri: str, config: Config, out: Path) -> Snapshot:
    """A fresh snapshot; when checkpoints exist they must come from the same data (fingerprint)."""
    snap_dir, ckpt_dir = out / "snapshot", out / "checkpoints"
    previous = load_snapshot(snap_dir).fingerprint if (snap_dir / "fingerprint.json").is_file() else None
    if previous is not None and latest_complete(ckpt_dir) is not None:
        current = fingerprint_files(list_data_files(data_uri))
        if current != previous:
            raise UserError(
                f"'{out}' holds checkpoints trained on other data (fingerprint {previous[:12]}, the data root now "
                f"has {current[:12]}); resuming would mix datasets. Pass a new --out directory."
            )
        _refuse_other_split(out, latest_complete(ckpt_dir), config)
        _refuse_other_training(out, latest_complete(ckpt_dir), config)
        return load_snapshot(snap_dir)
    return build_snapshot(data_uri, config, snap_dir)


def _refuse_other_split(out: Path, latest: Path, config: Config) -> None:
    """UserError when the checkpoints (and so the snapshot kept for them) were split with other data.* split
    settings: resuming would ignore the new ones. Checkpoints without the record are not checked."""
    saved = (read_meta(latest).get("identity") or {}).get("data") or {}
    current = split_identity(config.data)
    differences = identity_differences({k: v for k, v in saved.items() if k in current}, current, "data.")
    if differences:
        raise UserError(
            f"'{out}' holds a snapshot and checkpoints split with other settings ({'; '.join(differences)}); "
            "resuming would train on the old split and ignore the new settings. Pass a new --out directory to "
            "split and train afresh, or restore those settings to resume."
        )


def _refuse_other_training(out: Path, latest: Path, config: Config) -> None:
    """UserError when the checkpoints were trained with other task, model or training settings. Every rank
    refuses them too (``refuse_another_training``), but here, before any rank starts, the command exits 2
    with one message instead of each rank's traceback and a "training failed" exit 1, as for a crash.
    The rest of the identity (data rows, precision, task code) is the ranks' to compare."""
    from dataclasses import asdict

    from ctpipe.components.tasks import task_record

    saved = read_meta(latest).get("identity") or {}
    current = json.loads(json.dumps({
        "task": task_record(config.task),
        "model": asdict(config.model),
        "train": {k: v for k, v in asdict(config.train).items() if k in RESUME_TRAIN_KEYS},
    }))
    saved = {k: saved[k] for k in current if k in saved}
    if isinstance(saved.get("train"), dict):  # the ranks' precision (dtype) is theirs to compare
        saved["train"] = {k: v for k, v in saved["train"].items() if k in current["train"]}
    differences = identity_differences(saved, current)
    if differences:
        raise UserError(
            f"'{out}' holds checkpoints of another training ({'; '.join(differences)}); resuming would continue "
            "that training's weights under these settings. Restore those settings to resume, or pass a new --out "
            "directory to train afresh."
        )


def mlflow_run_for_output(tracking_uri: str, config: Config, out: Path, data_uri: str) -> str:
    """The MLflow run of this output directory: created once, reused when training resumes."""
    from ctpipe.components.lib.tracking import create_run, ensure_experiment

    marker = out / "mlflow_run.json"
    if marker.is_file():
        saved = json.loads(marker.read_text())
        if saved.get("tracking_uri") == tracking_uri:
            return saved["run_id"]
    experiment = ensure_experiment(tracking_uri, config.registry.experiment)
    run_id = create_run(
        tracking_uri,
        experiment,
        run_name=f"ctpipe-train-{out.name}",
        tags={"ctpipe.trigger": "train-cli", "ctpipe.data_uri": data_uri},
    )
    write_json_atomic(marker, {"tracking_uri": tracking_uri, "run_id": run_id})
    return run_id


def train_standalone(
    data_uri: str, out_dir: str | Path, config: Config, *, tracking_uri: str | None = None
) -> dict[str, Any]:
    """Snapshot + train (local launcher, resuming from DIR/checkpoints) + DIR/train_summary.json.

    With ``tracking_uri`` rank 0 logs params and metrics into one MLflow run per output directory.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    snapshot = _snapshot_for_resume(data_uri, config, out)
    run_id = mlflow_run_for_output(tracking_uri, config, out, data_uri) if tracking_uri else None
    job = "ctpipe-train-" + hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:8]
    result = train_model(
        str(snapshot.root),
        str(out / "checkpoints"),
        config,
        tracking_uri=tracking_uri,
        mlflow_run_id=run_id,
        job_name=job,
        launcher=LocalLauncher(),
    )
    summary = {
        **result.summary(),
        "data_fingerprint": snapshot.fingerprint,
        "data_uri": data_uri,
        "checkpoint_dir": str(out / "checkpoints"),
        "snapshot_dir": str(snapshot.root),
        "mlflow_run_id": run_id,
    }
    write_json_atomic(out / SUMMARY_FILE, summary)
    return summary
