"""The tabular task's first batch as the model sees it: its exact tensors decoded back to column names and values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctpipe.components.lib.data.encoding import Preprocessing
from ctpipe.components.lib.data.stream_stats import PROFILE_LIMIT, category_key


@dataclass
class TabularFirstBatch:
    """The first batch's tensors by name, as ``decode_first_batch`` reads them."""

    raw: Any
    x_num: Any
    x_cat: Any
    y: Any
    drawn: str


def decode_first_batch(batch: Any, prep: Preprocessing, label: str, target: dict[str, float] | None = None) -> dict[str, Any]:
    """The exact tensors of the tabular task's first batch (``x_num``, ``x_cat``, ``y``, ``drawn``), decoded
    back to column names and values; ``target``: a regression's label standardisation (``mean``, ``std``), by
    which ``y`` decodes to the label's value (else ``y`` is a class index)."""
    n = len(batch.y)
    numeric_cols, cat_cols = list(prep.numeric), list(prep.categorical)
    records = []
    for i in range(n):
        rec: dict[str, Any] = {"numeric": {}, "categorical": {}}
        for k, col in enumerate(numeric_cols):
            z = float(batch.x_num[i, k])
            st = prep.numeric[col]
            rec["numeric"][col] = {"tensor": z, "decoded": z * st["std"] + st["mean"]}
        for k, col in enumerate(cat_cols):
            idx = int(batch.x_cat[i, k])
            vocab = prep.categorical[col]
            rec["categorical"][col] = {"tensor": idx, "decoded": vocab[idx - 1] if 0 < idx <= len(vocab) else "<unseen/missing>"}
        if target is not None:
            z = float(batch.y[i])
            rec["label"] = {"tensor": z, "decoded": z * target["std"] + target["mean"], "column": label}
        else:
            yi = int(batch.y[i])
            rec["label"] = {"tensor": yi, "decoded": prep.classes[yi], "column": label}
        records.append(rec)
    return {
        "drawn": batch.drawn,
        "model_input": "model(x_num, x_cat): x_num standardised with the train mean/std (missing -> 0), "
                       "x_cat vocabulary indices (0 = unseen or missing)",
        "x_num": {"shape": list(batch.x_num.shape), "dtype": str(batch.x_num.dtype), "columns": numeric_cols},
        "x_cat": {"shape": list(batch.x_cat.shape), "dtype": str(batch.x_cat.dtype), "columns": cat_cols},
        "y": {"shape": [n], "dtype": str(batch.y.dtype), "classes": prep.classes},
        "rows": records,
    }


def first_batch_mismatches(dump: dict[str, Any], raw, label: str) -> list[str]:
    """Where the tabular dump's decoded tensors differ from the raw rows (missing numbers decode to the
    train mean, by design)."""
    mismatches = []
    for i, rec in enumerate(dump["rows"]):
        row = raw.iloc[i]
        for col, v in rec["numeric"].items():
            raw_v = row[col]
            # Missing, infinite and beyond-float32 values are all read as missing (data/encoding.py).
            if raw_v is not None and math.isfinite(float(raw_v)) and abs(float(raw_v)) <= PROFILE_LIMIT:
                if not math.isclose(v["decoded"], float(raw_v), rel_tol=1e-4, abs_tol=1e-3):
                    mismatches.append(f"row {i} {col}: tensor decodes to {v['decoded']:.6g}, raw {raw_v}")
        for col, v in rec["categorical"].items():
            raw_v = row[col]
            if raw_v is not None and category_key(str(raw_v)) != category_key(v["decoded"]) \
                    and v["decoded"] != "<unseen/missing>":
                mismatches.append(f"row {i} {col}: tensor decodes to {v['decoded']!r}, raw {raw_v!r}")
        decoded = rec["label"]["decoded"]
        if isinstance(decoded, float):  # a regression's label, decoded from its standardised value
            if not math.isclose(decoded, float(row[label]), rel_tol=1e-4, abs_tol=1e-3):
                mismatches.append(f"row {i} label: tensor decodes to {decoded:.6g}, raw {row[label]!r}")
        elif str(row[label]) != decoded:
            mismatches.append(f"row {i} label: tensor decodes to {rec['label']['decoded']!r}, raw {row[label]!r}")
    return mismatches
