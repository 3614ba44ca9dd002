"""Partitions into one frame without changing a value: each row keeps the values its own partition holds.

``pd.concat`` gives a column the common dtype of its pieces, and that can change values that a split
was hashed from (``splits.py``) or the kind of a column:

- a ``float32`` partition next to a ``float64`` (or integer) one becomes float64, and ``float32(0.1)``
  turns into ``0.10000000149011612``: its rows' canonical text changes, so old rows change split when a
  partition of another width arrives. Narrow floats are widened through their shortest text
  (``0.1`` → ``0.1``), the value a CSV copy of them reads back as, so their canonical text is kept;
- integers beyond 2**53 next to floats (a partition whose integer column has a null, or stores it as
  float) become float64 and are rounded (``2**62 + 7`` → ``2**62``): they are held as nullable ``Int64``
  instead, and a column mixing such integers with fractional floats is a data error (no one dtype holds
  both), named with its partitions;
- a partition where a column is all null (Arrow's null type, a header-only CSV, a zero-row file) is
  ``object`` and made the whole column ``object``: a numeric column became categorical. A column that is
  all null in a partition takes the dtype of the partitions that hold values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.splits import PARTITION_COLUMN
from ctpipe.components.lib.errors import DataValidationError

# Integers of larger magnitude are not all representable as float64.
EXACT_FLOAT_INT = 2**53


def _is_int(dtype: object) -> bool:
    return pd.api.types.is_integer_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype)


def _is_float(dtype: object) -> bool:
    return pd.api.types.is_float_dtype(dtype)


def _beyond_float(series: pd.Series) -> bool:
    """Whether an integer column holds a value that float64 cannot hold exactly."""
    values = series.dropna()
    if values.empty:
        return False
    return bool(values.max() > EXACT_FLOAT_INT or values.min() < -EXACT_FLOAT_INT)


def combined_dtype(pieces: list[pd.Series]) -> object:
    """The dtype one column of ``pieces`` (one per partition or batch) is held in, changing no value."""
    typed = [p for p in pieces if p.notna().any()]
    if not typed:
        return pd.concat([p.iloc[:0] for p in pieces]).dtype
    target = pd.concat([p.iloc[:0] for p in typed]).dtype
    some_null = any(p.isna().any() for p in pieces)  # a piece without rows adds none
    if some_null and pd.api.types.is_bool_dtype(target) and not isinstance(target, pd.BooleanDtype):
        return np.dtype(object)  # as a bool column with nulls reads: True/False/None
    if _is_int(target) and some_null and not isinstance(target, pd.api.extensions.ExtensionDtype):
        target = np.dtype("float64")  # as an integer column with nulls reads
    if (_is_float(target) and any(_is_int(p.dtype) for p in typed)
            and any(_beyond_float(p) for p in typed if _is_int(p.dtype))):
        return pd.Int64Dtype()
    return target


def _refuse_mixed_integers(piece: pd.Series, where: str) -> DataValidationError:
    return DataValidationError(
        f"column '{piece.name}' holds integers beyond 2**53 in some partitions and, in {where or 'another'}, values "
        "no int64 holds (fractions, or integers beyond int64): float64 would round the integers (and move their "
        "rows' splits). Store the column as one type in every partition (an id as int64, or as text)."
    )


def conform(piece: pd.Series, target: object, where: str = "") -> pd.Series:
    """``piece`` in dtype ``target`` with every value's canonical text kept (see the module docstring)."""
    if piece.dtype == target:
        return piece
    if not piece.notna().any():  # all null (or no rows): nulls of the target dtype
        return piece.astype(object).astype(target)
    if isinstance(target, pd.Int64Dtype) and (_is_float(piece.dtype) or _is_int(piece.dtype)):
        values = piece.to_numpy(dtype="float64", na_value=np.nan)
        finite = values[~np.isnan(values)]
        if not np.all(finite == np.floor(finite)):
            raise _refuse_mixed_integers(piece, where)
        try:
            return piece.astype("Int64")
        except (OverflowError, TypeError, ValueError):
            raise _refuse_mixed_integers(piece, where) from None
    if _is_float(piece.dtype) and piece.dtype.itemsize < 8 and _is_float(target) and target.itemsize == 8:
        # Through the shortest text at the narrow precision: float32(0.1) becomes 0.1, not 0.10000000149011612.
        # Integral values (their text is the integer) are widened exactly.
        narrow = piece.to_numpy(dtype=np.dtype(f"float{8 * piece.dtype.itemsize}"), na_value=np.nan)
        wide = narrow.astype(np.float64)
        with np.errstate(invalid="ignore"):
            fraction = np.isfinite(narrow) & (np.floor(narrow) != narrow)
        wide[fraction] = narrow[fraction].astype(str).astype(np.float64)
        return pd.Series(wide, index=piece.index, name=piece.name).astype(target)
    return piece


def concat_partitions(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat`` of partitions' frames (rows renumbered), each column in ``combined_dtype`` of its pieces."""
    if len(frames) == 1:
        return frames[0]
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    frames = [f.reindex(columns=columns) for f in frames]  # a column a partition lacks: null there
    for column in columns:
        pieces = [f[column] for f in frames]
        if len({str(p.dtype) for p in pieces}) == 1:
            continue
        target = combined_dtype(pieces)
        for f in frames:
            where = f"partition {f[PARTITION_COLUMN].iloc[0]}" if PARTITION_COLUMN in f.columns and len(f) else ""
            f[column] = conform(f[column], target, where)
    return pd.concat(frames, ignore_index=True)
