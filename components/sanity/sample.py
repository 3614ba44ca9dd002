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
from components.data.split_files import read_column, take_rows

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


def _counts(y, classes: list[str]) -> str:
    counts = np.bincount(np.asarray(y), minlength=len(classes))
    return ", ".join(f"{c} {int(n)}" for c, n in zip(classes, counts, strict=True))


def load_sanity_data(snapshot: Snapshot, cfg: Config, *, seed: int = SAMPLE_SEED) -> SanityData:
    """Stratified samples of the train and val splits, encoded exactly as training encodes them."""
    import torch

    from components.training.data import first_batch_indices

    prep = snapshot.preprocessing
    label = snapshot.schema.label
    # Only the label column of the splits is read whole; the sampled rows are read by row group.
    train_path, val_path = snapshot.root / "train.parquet", snapshot.root / "val.parquet"
    train_labels = read_column(train_path, label)
    n_train = len(train_labels)
    rows = cfg.sanity.sample_rows
    floor = class_floor(rows, len(prep.classes))
    # The models train on at most half of each class's train rows; the other half and the val split
    # are their held-out rows, so a rare class is present on both sides.
    labels = label_text(train_labels)
    half = (labels.value_counts().reindex(sorted(labels.unique())).to_numpy() + 1) // 2
    picked = stratified_rows(train_labels, rows, seed=seed, floor=floor, cap=half)
    train = take_rows(train_path, picked)
    others = np.setdiff1d(np.arange(n_train), picked)  # the train rows not picked, in order
    rest_labels = pd.concat([train_labels.iloc[others], read_column(val_path, label)], ignore_index=True)
    chosen = stratified_rows(rest_labels, HELD_OUT_FACTOR * rows, seed=seed, floor=floor)
    val = _rows_of_rest(train_path, val_path, others, chosen)
    n_rest = len(rest_labels)

    def tensors(frame):
        x_num, x_cat = encode_features(frame, prep)
        y = encode_labels(frame, label, prep.classes)
        return torch.tensor(x_num), torch.tensor(x_cat), torch.tensor(y)

    xn, xc, y = tensors(train)
    vn, vc, vy = tensors(val) if len(val) else (xn[:0], xc[:0], y[:0])
    try:
        first_rows = first_batch_indices(n_train, batch_size=cfg.train.batch_size,
                                         world_size=cfg.train.workers, seed=cfg.train.seed)
        drawn = (f"rank 0 of {cfg.train.workers}, epoch 0: DistributedSampler(shuffle=True, seed={cfg.train.seed}, "
                 f"drop_last=True) over the {n_train} train rows, first {cfg.train.batch_size}")
    except (ValueError, RuntimeError):
        first_rows, drawn = list(range(min(FIRST_BATCH_ROWS, n_train))), "the first train rows"
    raw = take_rows(train_path, np.asarray(first_rows, dtype=np.int64))
    first = FirstBatch(raw, *tensors(raw), drawn=drawn)
    sampled = (f"train sample {len(y)} of {n_train} train rows ({_counts(y, prep.classes)}), held-out sample "
               f"{len(vy)} of the other {n_rest} train and val rows ({_counts(vy, prep.classes)}), stratified by "
               f"label (at least {floor} rows a class where there are)")
    return SanityData(xn, xc, y, vn, vc, vy, len(prep.classes), first, sampled)
