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
from components.data.snapshot import Snapshot, encode_features, encode_labels, label_text

SAMPLE_SEED = 0
FIRST_BATCH_ROWS = 16
# Held-out rows per training-sample row: evaluation is a forward pass, so more rows cost little and
# narrow the intervals the training checks are judged by.
HELD_OUT_FACTOR = 4


@dataclass
class FirstBatch:
    """The trainer's first batch on rank 0: its raw rows, the tensors made from them, and how it was drawn."""

    raw: Any
    x_num: Any
    x_cat: Any
    y: Any
    drawn: str


@dataclass
class SanityData:
    """Encoded tensors of a train sample and a held-out sample (other train rows and val), plus what decodes them."""

    x_num: Any
    x_cat: Any
    y: Any
    val_x_num: Any
    val_x_cat: Any
    val_y: Any
    n_classes: int
    first_batch: FirstBatch
    # How the samples were drawn, for the report: rows per class in each.
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


def _counts(y, classes: list[str]) -> str:
    counts = np.bincount(np.asarray(y), minlength=len(classes))
    return ", ".join(f"{c} {int(n)}" for c, n in zip(classes, counts, strict=True))


def load_sanity_data(snapshot: Snapshot, cfg: Config, *, seed: int = SAMPLE_SEED) -> SanityData:
    """Stratified samples of the train and val splits, encoded exactly as training encodes them."""
    import torch

    from components.training.data import first_batch_indices

    prep = snapshot.preprocessing
    label = snapshot.schema.label
    full_train = snapshot.frame("train")
    rows = cfg.sanity.sample_rows
    floor = class_floor(rows, len(prep.classes))
    # The models train on at most half of each class's train rows; the other half and the val split
    # are their held-out rows, so a rare class is present on both sides.
    labels = label_text(full_train[label])
    half = (labels.value_counts().reindex(sorted(labels.unique())).to_numpy() + 1) // 2
    picked = stratified_rows(full_train[label], rows, seed=seed, floor=floor, cap=half)
    train = full_train.iloc[picked].reset_index(drop=True)
    rest = pd.concat([full_train.drop(index=full_train.index[picked]), snapshot.frame("val")], ignore_index=True)
    val = rest.iloc[stratified_rows(rest[label], HELD_OUT_FACTOR * rows, seed=seed, floor=floor)].reset_index(drop=True)

    def tensors(frame):
        x_num, x_cat = encode_features(frame, prep)
        y = encode_labels(frame, label, prep.classes)
        return torch.tensor(x_num), torch.tensor(x_cat), torch.tensor(y)

    xn, xc, y = tensors(train)
    vn, vc, vy = tensors(val) if len(val) else (xn[:0], xc[:0], y[:0])
    try:
        first_rows = first_batch_indices(len(full_train), batch_size=cfg.train.batch_size,
                                         world_size=cfg.train.workers, seed=cfg.train.seed)
        drawn = (f"rank 0 of {cfg.train.workers}, epoch 0: DistributedSampler(shuffle=True, seed={cfg.train.seed}, "
                 f"drop_last=True) over the {len(full_train)} train rows, first {cfg.train.batch_size}")
    except (ValueError, RuntimeError):
        first_rows, drawn = list(range(min(FIRST_BATCH_ROWS, len(full_train)))), "the first train rows"
    raw = full_train.iloc[first_rows].reset_index(drop=True)
    first = FirstBatch(raw, *tensors(raw), drawn=drawn)
    sampled = (f"train sample {len(y)} of {len(full_train)} train rows ({_counts(y, prep.classes)}), held-out sample "
               f"{len(vy)} of the other {len(rest)} train and val rows ({_counts(vy, prep.classes)}), stratified by "
               f"label (at least {floor} rows a class where there are)")
    return SanityData(xn, xc, y, vn, vc, vy, len(prep.classes), first, sampled)
