"""Stable train/val/test splits: a salted hash of each row's canonical key, so a row never moves.

A row's split must not depend on how a partition happens to store its values: a new partition with one
null turns an integer column into float64, a CSV file reads digit-only strings as integers, a writer
may use ``category`` or ``float32``. So every value is first put into one canonical text form
(``CANONICAL_FORM``), and only that text is hashed:

- null (None, NaN, NA, NaT): no value. A null key is a data error; in content hashing the cell is left out.
- integers of any width, and floats holding an integral value: the decimal integer (``5.0`` → ``5``,
  ``-0.0`` → ``0``); booleans: ``true`` / ``false`` (not ``1`` / ``0``).
- other floats: the shortest text that reads back as the same value at the column's own precision
  (``float32(0.1)`` → ``0.1``, as a CSV copy of it reads back); ``inf`` / ``-inf``.
- strings, ``category`` and ``object`` values: the same text whichever dtype holds them (a category
  by its category value); datetimes as ISO 8601 in microseconds, UTC when time-zone aware.

For hashing (``split_keys``), a string in ISO 8601 date or date-time form (``2025-03-01``,
``2025-03-01 20:46:35``, ``...T20:46:35.5Z``) is read as the datetime it names: a CSV copy of a datetime
column holds exactly such text, so the same rows split alike from Parquet and from CSV (form v3; v2,
which hashed such text as it stands, is still understood when a champion's training rows are recomputed).

With ``data.key`` set, the split is ``blake2b(salt + NUL + canonical key)``. Without it, a row's content
key is the sum (mod 2**64) over its non-null cells of ``blake2b(column name + US + canonical value)``:
every column except ctpipe's own (``__partition``, ``__split``), in no particular order, so a column
that is added later (null in the old rows) or a reordering of the columns moves no old row.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import hashlib
import heapq
import math
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import numpy as np
import pandas as pd

from ctpipe.components.lib.errors import DataValidationError

# Bumped whenever the canonical form or the hash changes: a model records it with its split.
CANONICAL_FORM = "ctpipe-split/v3"
# Every form this code can still hash by, and whether it reads ISO 8601 text as a datetime (v3 does).
KNOWN_FORMS = {"ctpipe-split/v2": False, CANONICAL_FORM: True}
# An ISO 8601 date or date-time written as text: what a CSV copy of a datetime column holds.
_ISO_DATETIME = r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?)?(?:Z|[+-]\d{2}(?::?\d{2})?)?"
SPLITS = ("train", "val", "test")
SPLIT_COLUMN = "__split"
PARTITION_COLUMN = "__partition"
# ctpipe's own bookkeeping columns: never part of a row's content.
INTERNAL_COLUMNS = (PARTITION_COLUMN, SPLIT_COLUMN)
_MAX_LISTED = 8


class _SplitSchema(Protocol):
    key: str | None
    label: str


# --- the canonical text of a value ------------------------------------------------------------


def _float_text(value: float | np.floating) -> str:
    """Shortest round-trip text at the value's own precision; integral values as integers."""
    if math.isnan(value):
        raise ValueError("NaN has no canonical text")  # callers treat NaN as null first
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if float(value).is_integer():
        return str(int(value))
    return str(value) if isinstance(value, np.floating) else repr(float(value))


def canonical_scalar(value: Any) -> str | None:
    """The canonical text of one value (None for null); see the module docstring."""
    if value is None or value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, float | np.floating):
        return None if math.isnan(value) else _float_text(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="surrogateescape")
    if isinstance(value, decimal.Decimal):
        if value.is_nan():
            return None
        return str(int(value)) if value == value.to_integral_value() else format(value.normalize(), "f")
    if isinstance(value, pd.Timestamp | dt.datetime | np.datetime64):
        ts = pd.Timestamp(value)
        if ts is pd.NaT:
            return None
        if ts.tzinfo is not None:
            ts = ts.tz_convert("UTC").tz_localize(None)
        return ts.strftime("%Y-%m-%dT%H:%M:%S.%f")
    if isinstance(value, dt.date):
        return value.isoformat() + "T00:00:00.000000"
    return str(value)


def _float_column_text(values: np.ndarray) -> np.ndarray:
    """Vectorised ``_float_text`` over a float array (nulls → None)."""
    out = np.empty(len(values), dtype=object)
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore"):
        integral = finite & (np.floor(values) == values)
    small = integral & (np.abs(values) < 2.0**63)
    out[small] = values[small].astype(np.int64).astype(str).astype(object)
    big = integral & ~small
    out[big] = [str(int(v)) for v in values[big]]
    other = finite & ~integral
    # numpy prints the shortest round-trip text at the array's own precision (float32 stays 0.1).
    out[other] = values[other].astype(str).astype(object)
    out[np.isposinf(values)] = "inf"
    out[np.isneginf(values)] = "-inf"
    out[np.isnan(values)] = None
    return out


def canonical_text(series: pd.Series) -> pd.Series:
    """The canonical text of every value of ``series`` (object dtype, None for null), same index."""
    dtype = series.dtype
    null = series.isna().to_numpy()
    if isinstance(dtype, pd.CategoricalDtype):
        categories = canonical_text(pd.Series(dtype.categories)).to_numpy(dtype=object)
        codes = series.cat.codes.to_numpy()
        out = np.where(codes >= 0, categories[np.maximum(codes, 0)], None)
    elif pd.api.types.is_bool_dtype(dtype):
        filled = series.astype("boolean").fillna(False).to_numpy(dtype=bool)
        out = np.where(filled, "true", "false").astype(object)
    elif pd.api.types.is_integer_dtype(dtype):
        wide = "uint64" if str(dtype).lower() == "uint64" else "int64"
        out = series.to_numpy(dtype=wide, na_value=0).astype(str).astype(object)
    elif pd.api.types.is_float_dtype(dtype):
        native = series.to_numpy(dtype=np.float32 if dtype == np.float32 else np.float64, na_value=np.nan)
        out = _float_column_text(native)
    elif pd.api.types.is_string_dtype(dtype) and not pd.api.types.is_object_dtype(dtype):
        out = series.to_numpy(dtype=object, na_value=None)
    else:
        # object, datetime and anything else: value by value, cached by (type, value) because pandas and
        # Python treat True, 1 and 1.0 as one key while their canonical texts differ.
        cache: dict[tuple[type, Any], str | None] = {}

        def text(value: Any) -> str | None:
            try:
                return cache[(type(value), value)]
            except KeyError:
                cache[(type(value), value)] = found = canonical_scalar(value)
                return found
            except TypeError:  # unhashable values (lists, dicts)
                return canonical_scalar(value)

        out = np.array([text(v) for v in series.astype(object)], dtype=object)
    out = np.asarray(out, dtype=object)
    out[null] = None
    return pd.Series(out, index=series.index, dtype=object, name=series.name)


# --- split keys -----------------------------------------------------------------------------------


def _iso_text_as_datetime(texts: list[str | None]) -> list[str | None]:
    """Each text that is an ISO 8601 date or date-time replaced by that datetime's canonical text."""
    found = pd.Series(texts, dtype=object).str.fullmatch(_ISO_DATETIME).fillna(False).to_numpy(dtype=bool)
    out = list(texts)
    for i in np.flatnonzero(found):
        try:
            out[i] = canonical_scalar(pd.Timestamp(texts[i].replace(",", ".")))
        except (ValueError, OverflowError):  # 2025-02-30 and the like: not a date, so the text itself
            pass
    return out


def _may_hold_text(series: pd.Series) -> bool:
    """Whether a column's values can be text (object, string or category dtype)."""
    dtype = series.dtype
    return isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_object_dtype(dtype) or (
        pd.api.types.is_string_dtype(dtype))


def _check_form(form: str) -> bool:
    if form not in KNOWN_FORMS:
        raise ValueError(f"unknown canonical form {form!r}; known: {', '.join(KNOWN_FORMS)}")
    return KNOWN_FORMS[form]


def _digest64(texts: Iterable[str]) -> np.ndarray:
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(t.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")
         for t in texts),
        dtype=np.uint64,
    )


def _distinct_texts(series: pd.Series, iso_dates: bool) -> tuple[np.ndarray, list[str]]:
    """(code of each row, canonical text of each code); code -1 is null. Distinct values are found first,
    so only they are turned into text (object columns go value by value: pandas merges True and 1)."""
    if pd.api.types.is_object_dtype(series.dtype):
        codes, uniques = pd.factorize(canonical_text(series), use_na_sentinel=True)
        texts = list(uniques)
    else:
        codes, uniques = pd.factorize(series, use_na_sentinel=True)
        texts = canonical_text(pd.Series(uniques)).tolist()
    if iso_dates and _may_hold_text(series):
        texts = _iso_text_as_datetime(texts)
    return codes, texts


def content_keys(data: pd.DataFrame, form: str = CANONICAL_FORM) -> pd.Series:
    """Each row's content key: the sum over its non-null cells of a hash of (column name, canonical value)."""
    iso_dates = _check_form(form)
    total = np.zeros(len(data), dtype=np.uint64)
    for column in data.columns:
        if column in INTERNAL_COLUMNS:
            continue
        codes, texts = _distinct_texts(data[column], iso_dates)
        cell = _digest64(f"{column}\x1f{t}" for t in texts)
        present = codes >= 0
        total[present] += cell[codes[present]]  # uint64 wraps: the sum is taken mod 2**64
    return pd.Series([f"{v:016x}" for v in total], index=data.index, dtype=object)


def _rows_text(data: pd.DataFrame, mask: np.ndarray, first_row: int = 0) -> str:
    """Where the flagged rows are: row numbers (from 0) within each partition's files, a few per partition
    (``first_row``: the number of ``data``'s first row in its partition, for a record batch of one partition)."""
    if PARTITION_COLUMN not in data.columns:
        rows = np.flatnonzero(mask) + first_row
        more = f" and {len(rows) - _MAX_LISTED} more" if len(rows) > _MAX_LISTED else ""
        return "rows " + ", ".join(map(str, rows[:_MAX_LISTED])) + more
    position = data.groupby(PARTITION_COLUMN, sort=False).cumcount().to_numpy() + first_row
    flagged = pd.DataFrame({"part": data[PARTITION_COLUMN].to_numpy()[mask], "row": position[mask]})
    parts = []
    for part, rows in flagged.groupby("part", sort=True)["row"]:
        listed = ", ".join(map(str, rows.iloc[:_MAX_LISTED]))
        more = f" and {len(rows) - _MAX_LISTED} more" if len(rows) > _MAX_LISTED else ""
        parts.append(f"partition {part} rows {listed}{more}")
    return "; ".join(parts[:_MAX_LISTED]) + (f"; and {len(parts) - _MAX_LISTED} more partitions" if len(parts) > _MAX_LISTED else "")


def key_texts(data: pd.DataFrame, key: str, label: str | None, form: str = CANONICAL_FORM, *,
              first_row: int = 0) -> pd.Series:
    """The canonical key of every row; a null key, or a key repeated with another label, is a data error."""
    keys = canonical_text(data[key])
    if _check_form(form) and _may_hold_text(data[key]):
        codes, uniques = pd.factorize(keys, use_na_sentinel=True)
        texts = np.array(_iso_text_as_datetime(list(uniques)) + [None], dtype=object)
        keys = pd.Series(texts[codes], index=keys.index, dtype=object, name=keys.name)  # code -1: the None
    null = keys.isna().to_numpy()
    if null.any():
        raise DataValidationError(
            f"the key column '{key}' (data.key) is null in {int(null.sum())} row(s): {_rows_text(data, null, first_row)} "
            "(counting from 0 within each partition's files). Every row needs a key to keep its split; fill the key at "
            "the source, or set data.key=null to split by row content."
        )
    if label is not None and label in data.columns:
        labels = canonical_text(data[label])
        per_key = pd.DataFrame({"key": keys, "label": labels}).groupby("key", sort=True)["label"].nunique(dropna=False)
        conflicting = per_key[per_key > 1]
        if len(conflicting):
            first = conflicting.index[:3]
            details = "; ".join(
                f"'{k}' at {_rows_text(data, (keys == k).to_numpy(), first_row)}" for k in first
            )
            more = f" (and {len(conflicting) - len(first)} more keys)" if len(conflicting) > len(first) else ""
            raise DataValidationError(
                f"the key column '{key}' (data.key) repeats {len(conflicting)} key(s) with different labels "
                f"('{label}'): {details}{more}. A key names one example; deduplicate at the source (keep the "
                "correct label), or key by a column that is unique per example."
            )
    return keys


def split_keys(data: pd.DataFrame, schema: _SplitSchema, form: str = CANONICAL_FORM, *, first_row: int = 0) -> pd.Series:
    """The canonical text each row's split is hashed from: its key, or its content key without one
    (``form``: an earlier canonical form from ``KNOWN_FORMS``, to recompute an older model's split)."""
    if schema.key is not None:
        return key_texts(data, schema.key, schema.label, form, first_row=first_row)
    return content_keys(data, form)


def split_fractions(keys: Iterable[str], salt: str) -> np.ndarray:
    """Each key's uniform position in [0, 1): the first 8 bytes of ``blake2b(salt + NUL + key)``."""
    prefix = salt.encode() + b"\0"
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(prefix + k.encode("utf-8", "surrogateescape"), digest_size=8).digest(), "big")
         for k in keys),
        dtype=np.float64,
    ) / float(1 << 64)


def assign_splits(keys: pd.Series, *, val_fraction: float, test_fraction: float, salt: str) -> pd.Series:
    """Assign each key to train/val/test by its salted hash: test below test_fraction, then val, then train."""
    u = split_fractions(keys, salt)
    out = np.where(u < test_fraction, "test", np.where(u < test_fraction + val_fraction, "val", "train"))
    return pd.Series(out, index=keys.index, name=SPLIT_COLUMN)


# --- the split a model was trained on -------------------------------------------------------------


@dataclass(frozen=True)
class SplitSettings:
    """Everything that decides a row's split; two equal settings put every row in the same split."""

    key: str | None
    salt: str
    val_fraction: float
    test_fraction: float
    canonical_form: str = CANONICAL_FORM

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitSettings:
        return cls(key=d.get("key"), salt=str(d["salt"]), val_fraction=float(d["val_fraction"]),
                   test_fraction=float(d["test_fraction"]), canonical_form=str(d.get("canonical_form", "")))

    @classmethod
    def from_config(cls, data: Any) -> SplitSettings:
        """The settings of a ``DataConfig``."""
        return cls(key=data.key, salt=data.split_salt, val_fraction=data.val_fraction, test_fraction=data.test_fraction)

    def assign(self, keys: pd.Series) -> pd.Series:
        return assign_splits(keys, val_fraction=self.val_fraction, test_fraction=self.test_fraction, salt=self.salt)


def keys_digest(keys: Iterable[str]) -> str:
    """SHA-256 over the sorted, distinct canonical keys (one per line): the identity of a set of rows."""
    return _digest_of_sorted(sorted(set(keys)))


def streamed_keys_digest(key_batches: Iterable[Iterable[str]]) -> str:
    """``keys_digest`` of every key of ``key_batches``, holding one batch's keys at a time.

    An external sort: each batch's sorted distinct keys go to a temporary file (length-prefixed, so any
    text round-trips), then the files are merged in str order, the order ``sorted`` gives ``keys_digest``.
    A split's keys (~90 bytes each as a Python set) need not fit in memory; the files take ~10 bytes a key.
    """
    with tempfile.TemporaryDirectory(prefix="ctpipe-keys-") as tmp, contextlib.ExitStack() as files:
        runs = []
        for index, keys in enumerate(key_batches):
            path = Path(tmp) / f"{index}.keys"
            with path.open("wb") as out:
                for key in sorted(set(keys)):
                    data = key.encode("utf-8", "surrogateescape")
                    out.write(len(data).to_bytes(4, "big") + data)
            runs.append(_read_run(files.enter_context(path.open("rb"))))
        return _digest_of_sorted(_distinct(heapq.merge(*runs)))


def _read_run(handle: BinaryIO) -> Iterator[str]:
    while header := handle.read(4):
        yield handle.read(int.from_bytes(header, "big")).decode("utf-8", "surrogateescape")


def _distinct(ordered: Iterable[str]) -> Iterator[str]:
    last = None
    for key in ordered:
        if key != last:
            yield key
            last = key


def _digest_of_sorted(keys: Iterable[str]) -> str:
    h = hashlib.sha256()
    for k in keys:
        h.update(k.encode("utf-8", "surrogateescape") + b"\n")
    return h.hexdigest()
