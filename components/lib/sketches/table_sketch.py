"""The sketch set of a table's feature columns: what one partition stores, and what a split merges.

``TableSketch`` has the interface of ``stream_stats.TableStats`` (``numeric``/``categorical`` accumulators with
``mean``, ``std``, ``count``, ``null_fraction``, ``quantiles``, ``sample``, ``frequencies``), so the reference
statistics (``reference_stats.reference_stats_of``) and a task's ``fit_streamed`` read it as they read
streamed statistics: one format for reports, drift and the model's reference. Serialized as JSON (numbers,
and the DataSketches' own bytes in base64): nothing stored is code or a pickle.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.stream_stats import row_priority
from ctpipe.components.lib.sketches.column_sketch import CategoricalSketch, NumericSketch

FORMAT = "ctpipe-sketch/v1"


def partition_priority(frame: pd.DataFrame, partition: str, first_row: int) -> np.ndarray:
    """Each row's sample priority: ``row_priority`` of its content and its position among the partition's rows it
    is sketched with, mixed with the partition's name, so a partition's sample does not depend on the partitions
    before it (a new day moves no old row's priority) and two partitions with equal rows differ."""
    salt = int.from_bytes(hashlib.blake2b(partition.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")
    return row_priority(frame, first_row=first_row) ^ np.uint64(salt)


@dataclass
class TableSketch:
    """Sketches of the feature columns over some rows (one partition's, or a merged split's)."""

    numeric: dict[str, NumericSketch] = field(default_factory=dict)
    categorical: dict[str, CategoricalSketch] = field(default_factory=dict)
    rows: int = 0

    @classmethod
    def for_columns(cls, numeric: list[str], categorical: list[str]) -> TableSketch:
        return cls({c: NumericSketch() for c in numeric}, {c: CategoricalSketch() for c in categorical})

    def add(self, batch: pd.DataFrame, priority: np.ndarray) -> TableSketch:
        """Fold in one batch (a column the batch lacks counts as null there)."""
        self.rows += len(batch)
        for col, acc in self.numeric.items():
            acc.add(batch[col] if col in batch.columns else pd.Series(np.nan, index=batch.index), priority)
        for col, acc in self.categorical.items():
            acc.add(batch[col] if col in batch.columns else pd.Series(None, index=batch.index, dtype=object))
        return self

    def merge(self, other: TableSketch) -> TableSketch:
        """A sketch of both (the same columns; neither is changed)."""
        if list(self.numeric) != list(other.numeric) or list(self.categorical) != list(other.categorical):
            raise ValueError(f"sketches of other columns cannot merge: {list(self.numeric) + list(self.categorical)} "
                             f"and {list(other.numeric) + list(other.categorical)}")
        return TableSketch({c: a.merge(other.numeric[c]) for c, a in self.numeric.items()},
                           {c: a.merge(other.categorical[c]) for c, a in self.categorical.items()},
                           self.rows + other.rows)

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "rows": self.rows,
                           "numeric": {c: a.to_dict() for c, a in self.numeric.items()},
                           "categorical": {c: a.to_dict() for c, a in self.categorical.items()}},
                          allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> TableSketch:
        doc = json.loads(text)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown sketch format {doc.get('format')!r}; this ctpipe reads {FORMAT}")
        return cls({c: NumericSketch.from_dict(d) for c, d in doc["numeric"].items()},
                   {c: CategoricalSketch.from_dict(d) for c, d in doc["categorical"].items()}, int(doc["rows"]))

    def summary(self) -> dict[str, Any]:
        """Figures per column, for reports and tests."""
        return {
            "rows": self.rows,
            "numeric": {c: {"count": a.count, "mean": a.mean, "std": a.std, "min": a.min, "max": a.max}
                        for c, a in self.numeric.items()},
            "categorical": {c: {"nulls": a.nulls, "distinct": a.distinct(), "counts": a.frequencies()}
                            for c, a in self.categorical.items()},
        }


def merge_all(sketches: list[TableSketch], numeric: list[str], categorical: list[str]) -> TableSketch:
    """The merge of ``sketches`` in their order (an empty sketch of the columns when there are none)."""
    out = TableSketch.for_columns(numeric, categorical)
    for sketch in sketches:
        out = out.merge(sketch)
    return out
