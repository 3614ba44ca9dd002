"""The tabular encoding: train-split preprocessing statistics, and rows as feature and label arrays.

Statistics come from the train split only (mean/std of numeric columns, categorical vocabularies by
frequency, the label's classes); a row's features are standardised numbers and vocabulary indices, its
label the index of its canonical text among the classes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.splits import canonical_text
from ctpipe.components.lib.data.stream_stats import TableStats, category_key, category_keys, profilable
from ctpipe.components.lib.errors import DataValidationError


@dataclass
class Preprocessing:
    """Statistics computed on the train split only: numeric mean/std, categorical vocabularies."""

    numeric: dict[str, dict[str, float]] = field(default_factory=dict)
    # Index 0 of every vocabulary is reserved for unseen or missing categories.
    categorical: dict[str, list[str]] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Preprocessing:
        return cls(numeric=d["numeric"], categorical=d["categorical"], classes=list(d["classes"]))

    @property
    def cardinalities(self) -> list[int]:
        return [len(v) + 1 for v in self.categorical.values()]


def preprocessing_of(stats: TableStats, classes: list[str]) -> Preprocessing:
    """Preprocessing from streamed train statistics: mean/std of the finite values, vocabularies by frequency."""
    numeric = {}
    for col, acc in stats.numeric.items():
        std = acc.std if acc.count > 1 else 1.0
        numeric[col] = {"mean": acc.mean if acc.count else 0.0, "std": std if std > 1e-12 else 1.0}
    categorical = {col: list(acc.frequencies()) for col, acc in stats.categorical.items()}
    return Preprocessing(numeric=numeric, categorical=categorical, classes=list(classes))


def encode_features(data: pd.DataFrame, prep: Preprocessing) -> tuple[np.ndarray, np.ndarray]:
    """Numeric features standardised (missing → mean → 0) and categorical ones as vocabulary indices (a value
    and a vocabulary entry match by ``stream_stats.category_key``: an integer column that a null made float
    keeps its categories)."""
    n = len(data)
    x_num = np.zeros((n, len(prep.numeric)), dtype=np.float32)
    for i, (col, st) in enumerate(prep.numeric.items()):
        values = pd.to_numeric(data[col], errors="coerce").astype("float64").to_numpy()
        # Beyond float32's range (1e308) is missing too, as the statistics count it: never an inf in x_num.
        values = np.where(profilable(values), values, np.nan)
        z = (values - st["mean"]) / st["std"]
        x_num[:, i] = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0)
    x_cat = np.zeros((n, len(prep.categorical)), dtype=np.int64)
    for i, (col, vocab) in enumerate(prep.categorical.items()):
        index: dict[str, int] = {}
        for j, v in enumerate(vocab):  # by category_key, so a vocabulary stored as "17.0" still knows 17
            index.setdefault(category_key(v), j + 1)
        x_cat[:, i] = category_keys(data[col]).map(index).fillna(0).astype("int64").to_numpy()
        x_cat[data[col].isna().to_numpy(), i] = 0
    return x_num, x_cat


def label_text(labels: pd.Series) -> pd.Series:
    """Class names of label values: their canonical text (splits.py), so ``1`` and ``1.0`` are class ``1``."""
    return canonical_text(labels)


def encode_labels(data: pd.DataFrame, label: str, classes: list[str]) -> np.ndarray:
    index = {c: i for i, c in enumerate(classes)}
    names = label_text(data[label])
    mapped = names.map(index)
    if mapped.isna().any():
        unseen = sorted(set(names[mapped.isna()].astype(str)))[:5]
        raise DataValidationError(f"label values {unseen} are not among the model's classes {classes}")
    return mapped.astype("int64").to_numpy()
