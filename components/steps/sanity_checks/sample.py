"""The rows the sanity checks run on: stratified samples of the train and val splits, and the trainer's first batch.

Both samples are stratified by label so that a rare class is present in numbers the checks can judge:
every class gets at least ``sample_rows // (4 * classes)`` rows (all of them if it has fewer), the rest
of the sample follows the split's class shares. Train and val are stratified the same way, so a model
trained on the train sample is judged on held-out rows of the same class mix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import Snapshot
from ctpipe.components.lib.data.split_files import take_rows

SAMPLE_SEED = 0
FIRST_BATCH_ROWS = 16
# Held-out rows per training-sample row: evaluation is a forward pass, so more rows cost little and
# narrow the intervals the training checks are judged by.
HELD_OUT_FACTOR = 4


@dataclass
class FirstBatch:
    """The trainer's first batch on rank 0: its raw rows, the examples the task made from them, how it was drawn."""

    raw: Any
    examples: Any  # a tasks.Batch
    drawn: str


@dataclass
class SanityData:
    """The task's examples of a train sample and a held-out sample (other train rows and val), and its state."""

    train: Any  # a tasks.Batch
    val: Any  # a tasks.Batch
    state: dict[str, Any]
    first_batch: FirstBatch
    # How the samples were drawn, for the report: rows per stratum in each.
    drawn: str = ""


def _rows_of_rest(train_path, val_path, others: np.ndarray, chosen: np.ndarray) -> pd.DataFrame:
    """Rows ``chosen`` of (the train rows ``others``, then every val row), read from the two split files."""
    from_train = chosen < len(others)
    parts = [take_rows(train_path, others[chosen[from_train]]), take_rows(val_path, chosen[~from_train] - len(others))]
    frame = pd.concat([p for p in parts if len(p)], ignore_index=True) if len(chosen) else parts[0]
    order = np.concatenate([np.flatnonzero(from_train), np.flatnonzero(~from_train)])
    return frame.iloc[np.argsort(order, kind="stable")].reset_index(drop=True)


def stratified_rows(labels: pd.Series, rows: int, *, seed: int, floor: int, cap: np.ndarray | None = None) -> np.ndarray:
    """Positions of a label-stratified sample: each class at least ``floor`` rows (or all it has), the rest by share.

    ``cap`` (per class, in sorted label order) bounds what a class may give. The positions come back
    shuffled (seeded), so any prefix of the sample mixes the classes.
    """
    rng = np.random.default_rng(seed)
    codes, _ = pd.factorize(labels.astype(str), sort=True)
    counts = np.bincount(codes, minlength=0 if cap is None else len(cap))
    available = counts if cap is None else np.minimum(counts, cap)
    if rows >= int(available.sum()):
        take = available
    else:
        base = np.minimum(available, floor)
        room = available - base
        spare = max(rows - int(base.sum()), 0)
        take = base + np.minimum(np.floor(spare * room / max(int(room.sum()), 1)).astype(int), room)
    picked = [rng.choice(np.flatnonzero(codes == c), size=int(k), replace=False) for c, k in enumerate(take) if k]
    return rng.permutation(np.concatenate(picked)) if picked else np.zeros(0, dtype=int)


def class_floor(rows: int, n_classes: int) -> int:
    """Rows each class gets at least in a sample of ``rows`` (a quarter of an equal share)."""
    return max(1, rows // (4 * max(n_classes, 1)))


def _counts(strata: pd.Series | None) -> str:
    if strata is None:
        return "not stratified"
    counts = strata.astype(str).value_counts().sort_index()
    return ", ".join(f"{c} {int(n)}" for c, n in counts.items())


def load_sanity_data(snapshot: Snapshot, cfg: Config, task: Any, *, seed: int = SAMPLE_SEED) -> SanityData:
    """Samples of the train and val splits (stratified by ``task.checks.strata``), encoded exactly as training does.

    The splits are read a record batch at a time for the strata; only the sampled rows are read whole.
    """
    from ctpipe.components.engine.data import first_batch_indices, reads_shards
    from ctpipe.components.engine.shards import group_sizes

    schema, state = snapshot.schema, snapshot.state
    train_path, val_path = snapshot.root / "train.parquet", snapshot.root / "val.parquet"
    rows = cfg.sanity.sample_rows

    def strata_of(split: str) -> tuple[pd.Series, bool]:
        """Each row's stratum in ``split`` (0 throughout when the task does not stratify), and whether it does."""
        parts, stratified = [], True
        for frame in snapshot.batches(split):
            found = task.checks.strata(frame, schema)
            stratified = stratified and found is not None
            parts.append(pd.Series(0, index=frame.index) if found is None else found)
        return (pd.concat(parts, ignore_index=True) if parts else pd.Series([], dtype=object)), stratified

    train_strata, stratified = strata_of("train")
    n_train = len(train_strata)
    n_strata = int(train_strata.astype(str).nunique())
    floor = class_floor(rows, n_strata)
    # The models train on at most half of each stratum's train rows; the other half and the val split
    # are their held-out rows, so a rare class is present on both sides.
    labels = train_strata.astype(str)
    half = (labels.value_counts().reindex(sorted(labels.unique())).to_numpy() + 1) // 2
    picked = stratified_rows(train_strata, rows, seed=seed, floor=floor, cap=half)
    train = take_rows(train_path, picked)
    others = np.setdiff1d(np.arange(n_train), picked)  # the train rows not picked, in order
    rest_strata = pd.concat([train_strata.iloc[others], strata_of("val")[0]], ignore_index=True)
    chosen = stratified_rows(rest_strata, HELD_OUT_FACTOR * rows, seed=seed, floor=floor)
    val = _rows_of_rest(train_path, val_path, others, chosen)
    n_rest = len(rest_strata)

    train_examples = task.codec.encode(train, state)
    val_examples = task.codec.encode(val, state) if len(val) else train_examples.select(slice(0, 0))
    try:
        sharded = reads_shards(n_train, in_memory_rows=cfg.train.in_memory_rows, task=task)
        first_rows = first_batch_indices(n_train, batch_size=cfg.train.batch_size, world_size=cfg.train.workers,
                                         seed=cfg.train.seed, group_sizes=group_sizes(train_path) if sharded else None)
        how = ("its shard of the seeded row-group permutation (train.in_memory_rows exceeded)" if sharded
               else f"DistributedSampler(shuffle=True, seed={cfg.train.seed}, drop_last=True)")
        drawn = (f"rank 0 of {cfg.train.workers}, epoch 0: {how} over the {n_train} train rows, "
                 f"first {cfg.train.batch_size}")
    except (ValueError, RuntimeError):
        first_rows, drawn = list(range(min(FIRST_BATCH_ROWS, n_train))), "the first train rows"
    raw = take_rows(train_path, np.asarray(first_rows, dtype=np.int64))
    first = FirstBatch(raw, task.codec.encode(raw, state), drawn=drawn)
    sampled = (f"train sample {len(train)} of {n_train} train rows ({_counts(task.checks.strata(train, schema))}), "
               f"held-out sample {len(val)} of the other {n_rest} train and val rows "
               f"({_counts(task.checks.strata(val, schema)) if len(val) else 'none'}){', stratified' if stratified else ''} "
               f"by label (at least {floor} rows a class where there are)")
    return SanityData(train_examples, val_examples, state, first, sampled)
