"""Retrospective checkpoint selection: the best evaluated checkpoint, exported as one self-contained file.

Not early stopping: training runs its full course and indexes every evaluated checkpoint; afterwards the
best one by the configured validation metric (not the last one) is consolidated from its distributed
shards into a single-file export that loads with ``torch.load(weights_only=True)``. The export is scored
again on the validation split, so a broken consolidation cannot go unnoticed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ctpipe.components.engine import checkpoint_index as index_files
from ctpipe.components.lib.config import Config, ModelConfig
from ctpipe.components.lib.data.snapshot import load_snapshot, training_split_record
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.errors import DataValidationError, TrainingError
from ctpipe.components.tasks import load_task, task_record

# An export of an fp32-trained model must reproduce the indexed metric to this tolerance (after bf16
# training a few borderline rows may flip; the re-scored metrics are then recorded, not enforced).
FP32_TOLERANCE = 1e-6
SCORE_BATCH = 2048


@dataclass
class Selected:
    """The chosen checkpoint and the export made from it."""

    step: int
    metric_name: str
    metric_value: float
    sha256: str
    # Better-ranked checkpoints skipped because their bytes no longer match their digests.
    warnings: list[str] = field(default_factory=list)


def best_intact_checkpoint(
    checkpoint_dir: str | Path, metric: str, mode: str
) -> tuple[index_files.IndexEntry, list[str]]:
    """The best complete checkpoint in index.json by ``metric`` in direction ``mode`` (max/min) whose files
    match the digests its index entry was committed with, and a warning for each better one skipped as
    damaged. Ties go to the lower validation loss, then the earlier step."""
    index = index_files.read_index(checkpoint_dir)
    entries = [index_files.IndexEntry.from_dict(e) for e in index["checkpoints"]]
    usable = [
        e for e in entries if e.kept and index_files.is_complete(index_files.checkpoint_path(checkpoint_dir, e.step))
    ]
    ranked = index_files.rank_entries(usable, metric, mode)
    if not ranked:
        known = sorted({k for e in entries for k in e.metrics})
        raise TrainingError(
            f"no complete checkpoint under '{checkpoint_dir}' has the metric '{metric}' "
            f"(metrics indexed: {', '.join(known) or 'none'}); set select.metric to one of them"
        )
    committed = index.get("digests") or {}  # absent in older indexes: each checkpoint's own record is used
    skipped = []
    for entry in ranked:
        path = index_files.checkpoint_path(checkpoint_dir, entry.step)
        damage = index_files.checkpoint_damage(path, committed.get(str(entry.step)))
        if damage is None:
            return entry, skipped
        skipped.append(f"checkpoint {path} ({metric}={entry.metrics[metric]}) is damaged ({damage}): not exported")
    raise TrainingError(
        f"every checkpoint under '{checkpoint_dir}' with the metric '{metric}' is damaged, none is exported: "
        + "; ".join(skipped) + ". Train again into a new checkpoint directory."
    )


def select_best_checkpoint(checkpoint_dir: str | Path, metric: str, mode: str) -> index_files.IndexEntry:
    """The best intact checkpoint (``best_intact_checkpoint``) without the warnings."""
    return best_intact_checkpoint(checkpoint_dir, metric, mode)[0]


def score_export(model_path: str | Path, snapshot_dir: str | Path) -> dict[str, float]:
    """Validation loss and the task's metrics of an exported model, from the snapshot's raw rows, as the
    trainer computes them (``val_loss``, ``val_<metric>``)."""
    import torch

    from ctpipe.components.tasks.export import load_model_export

    exported = load_model_export(model_path)
    snapshot = load_snapshot(snapshot_dir)
    task = exported.task
    # A task that encodes row by row is scored a row group at a time (the split may not fit in memory);
    # one that packs rows (causal_lm) encodes the split whole, as the trainer does.
    frames = snapshot.batches("val") if task.codec.rowwise else [snapshot.frame("val")]
    sums: dict[str, float] = {}
    count = 0
    with torch.no_grad():
        for frame in frames:
            examples = task.codec.encode(frame, exported.state)
            count += len(examples)
            for start in range(0, len(examples), SCORE_BATCH):
                part = examples.select(torch.arange(start, min(start + SCORE_BATCH, len(examples))))
                outputs = exported.model(*part.inputs)
                per_row = {"loss": task.objective.row_losses(outputs.float(), part.targets)} | task.objective.row_metrics(outputs,
                                                                                                       part.targets)
                for name, values in per_row.items():
                    sums[name] = sums.get(name, 0.0) + float(values.double().sum())
    return {f"val_{name}": total / max(count, 1) for name, total in sums.items()}


def select_and_export(checkpoint_dir: str, snapshot_dir: str, config: Config, model_path: str) -> Selected:
    """Pick the best checkpoint by ``config.select`` and export it (weights, config, preprocessing, classes)."""
    # torch only once a checkpoint is chosen: reading the index needs none (checkpoint_index.py).
    from ctpipe.components.engine import checkpointing as ckpt
    from ctpipe.components.tasks.export import build_exported_network, save_model_export

    metric, mode = config.select.metric, config.select.direction
    best, skipped = best_intact_checkpoint(checkpoint_dir, metric, mode)
    for warning in skipped:
        print(f"[select] WARNING: {warning}", flush=True)
    index = index_files.read_index(checkpoint_dir)
    # The index records the task and model the checkpoints were trained with; rebuild exactly that one.
    model_config = ModelConfig(**index["model_config"])
    record = index.get("task") or task_record(config.task)
    snapshot = load_snapshot(snapshot_dir)
    trained_on = index.get("data_fingerprint")  # absent in older indexes: not checked
    if trained_on is not None and trained_on != snapshot.fingerprint:
        # The export records the given snapshot's fingerprint and split: another's would be false lineage.
        raise DataValidationError(
            f"the checkpoints under '{checkpoint_dir}' were trained on the snapshot with fingerprint {trained_on}, "
            f"but the snapshot given to export them ('{snapshot_dir}') has fingerprint {snapshot.fingerprint}: "
            "export with the snapshot the run trained on"
        )
    # What the trainer's build_model was given: the run's whole config, with the model section it indexed.
    build_config = replace(config, model=model_config)
    model = build_exported_network(load_task(record), build_config, snapshot.state)
    ckpt.load_model_weights(ckpt.checkpoint_path(checkpoint_dir, best.step), model)
    metadata = {
        "step": best.step,
        "metric": metric,
        "metric_value": best.metrics[metric],
        "checkpoint_metrics": best.metrics,
        "data_fingerprint": snapshot.fingerprint,
        "data_uri": snapshot.data_uri,
        "train_world_size": index.get("world_size"),
        # The software and hardware training ran on (``lib/platform_facts.py``), for a reproduction to compare.
        "platform": index.get("platform"),
        # So a later evaluation can check that none of this model's training rows is in its test split.
        "split": training_split_record(snapshot, SplitSettings.from_config(config.data)),
    }
    state = {
        k: v.detach().float() if v.is_floating_point() else v.detach() for k, v in model.state_dict().items()
    }
    save_model_export(model_path, state, model_config, record, snapshot.state, metadata, build_config)
    rescored = score_export(model_path, snapshot_dir)
    drift = abs(rescored.get(metric, best.metrics[metric]) - best.metrics[metric])
    if index.get("dtype") == "float32" and metric in rescored and drift > FP32_TOLERANCE:
        raise TrainingError(
            f"the export of step {best.step} scores {metric}={rescored[metric]:.6f} on the validation split, but "
            f"training indexed {best.metrics[metric]:.6f}: the consolidated weights do not match the checkpoint"
        )
    # Record the re-scored metrics in the export itself, then hash the final file.
    metadata["export_val_metrics"] = rescored
    sha256 = save_model_export(model_path, state, model_config, record, snapshot.state, metadata, build_config)
    return Selected(step=best.step, metric_name=metric, metric_value=best.metrics[metric], sha256=sha256,
                    warnings=skipped)
