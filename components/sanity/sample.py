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

from components.config import Config
from components.data.snapshot import Snapshot

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
    """Samples of the train and val splits (stratified by ``task.strata``), encoded exactly as training does."""
    from components.training.data import first_batch_indices

    schema, state = snapshot.schema, snapshot.state
    full_train = snapshot.frame("train")
    rows = cfg.sanity.sample_rows

    def strata_of(frame: pd.DataFrame) -> pd.Series:
        found = task.strata(frame, schema)
        return pd.Series(0, index=frame.index) if found is None else found

    train_strata = strata_of(full_train)
    n_strata = int(train_strata.astype(str).nunique())
    floor = class_floor(rows, n_strata)
    # The models train on at most half of each stratum's train rows; the other half and the val split
    # are their held-out rows, so a rare class is present on both sides.
    labels = train_strata.astype(str)
    half = (labels.value_counts().reindex(sorted(labels.unique())).to_numpy() + 1) // 2
    picked = stratified_rows(train_strata, rows, seed=seed, floor=floor, cap=half)
    train = full_train.iloc[picked].reset_index(drop=True)
    rest = pd.concat([full_train.drop(index=full_train.index[picked]), snapshot.frame("val")], ignore_index=True)
    val = rest.iloc[stratified_rows(strata_of(rest), HELD_OUT_FACTOR * rows, seed=seed, floor=floor)].reset_index(drop=True)

    train_examples = task.encode(train, state)
    val_examples = task.encode(val, state) if len(val) else train_examples.select(slice(0, 0))
    try:
        first_rows = first_batch_indices(len(full_train), batch_size=cfg.train.batch_size,
                                         world_size=cfg.train.workers, seed=cfg.train.seed)
        drawn = (f"rank 0 of {cfg.train.workers}, epoch 0: DistributedSampler(shuffle=True, seed={cfg.train.seed}, "
                 f"drop_last=True) over the {len(full_train)} train rows, first {cfg.train.batch_size}")
    except (ValueError, RuntimeError):
        first_rows, drawn = list(range(min(FIRST_BATCH_ROWS, len(full_train)))), "the first train rows"
    raw = full_train.iloc[first_rows].reset_index(drop=True)
    first = FirstBatch(raw, task.encode(raw, state), drawn=drawn)
    stratified = "" if task.strata(full_train, schema) is None else ", stratified"
    sampled = (f"train sample {len(train)} of {len(full_train)} train rows ({_counts(task.strata(train, schema))}), "
               f"held-out sample {len(val)} of the other {len(rest)} train and val rows "
               f"({_counts(task.strata(val, schema)) if len(val) else 'none'}){stratified} by label (at least {floor} "
               "rows a class where there are)")
    return SanityData(train_examples, val_examples, state, first, sampled)
