"""Data the snapshot could not hold, refused by validation: a header that names a column twice, a column whose
type differs between partitions, and any value the snapshot writer cannot convert.

    findings = duplicate_headers(data_uri, files, fmt)        # before anything is read into a frame
    findings += mixed_partition_types(data, files)             # after reading, before anything is written
    finding = conversion_finding(err)                          # a pyarrow conversion error while writing

Before these, a CSV header ``region,...,region`` was read by pandas as ``region`` and ``region.1`` and a version
was registered from it (the Parquet equivalent was refused when read), and a column numeric in two partitions
and text (``"$14.69"``) in a third passed validation and then failed writing the snapshot with pyarrow's raw
message, an infrastructure failure the watcher retried. Each is now an error finding naming the file, the
column and the types (exit 2).
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from typing import Any

import pandas as pd

from ctpipe.components.lib.data.files import DATA_SUFFIXES, _fs_and_root, partition_of
from ctpipe.components.lib.data.splits import PARTITION_COLUMN, SPLIT_COLUMN
from ctpipe.components.steps.validate_data.findings import ERROR, SCHEMA_ANOMALY, Finding

# What pyarrow raises when a value does not fit the column's type (ArrowInvalid, ArrowTypeError) as it converts
# a pandas column: "Could not convert '$2.69' with type str: tried to convert to int64", and the column.
_CONVERSION = re.compile(r"Conversion failed for column (?P<column>.+?) with type (?P<dtype>\S+)")
_VALUE = re.compile(r"Could not convert (?P<value>.+?) with type (?P<type>\w+): tried to convert to (?P<target>\w+)")
_EXPECTED = re.compile(r"(?P<what>Expected (?:bytes|a \w+ object), got an? '?(?P<got>\w+)'? object)")
EXAMPLE_FILES = 5


def duplicate_headers(data_uri: str, files: list[Any], fmt: str = "auto") -> list[Finding]:
    """An error per CSV file whose header names a column more than once (pandas would read ``region.1``)."""
    fs, root = _fs_and_root(data_uri)
    base = root if fs.isdir(root) else root.rsplit("/", 1)[0]
    found = []
    for f in files:
        kind = fmt if fmt != "auto" else DATA_SUFFIXES.get("." + f.path.rsplit(".", 1)[-1].lower())
        if kind != "csv":
            continue  # a Parquet schema with a repeated name is refused when the file is read
        with fs.open(f"{base}/{f.path}" if base else f.path, "rb") as handle:
            first = handle.readline(1 << 20).decode("utf-8", errors="replace")
        header = next(csv.reader(io.StringIO(first)), [])
        repeated = sorted(name for name, count in Counter(header).items() if count > 1)
        for name in repeated:
            found.append(Finding(
                check="duplicate_header", passed=False, severity=ERROR, column=name, source="structure",
                message=(f"data file '{f.path}' names column '{name}' {Counter(header)[name]} times in its header "
                         f"(columns {', '.join(header[:12])}{' …' if len(header) > 12 else ''}); a column must be "
                         "named once: rename or drop the repeated one at the source"),
                observed=f"'{name}' repeated in the header", expected="unique column names"))
    return found


def _family(series: pd.Series) -> str:
    """The type family of one partition's values of a column: number, text, boolean, datetime, or mixed."""
    values = series.dropna()
    if values.empty:
        return "empty"
    if pd.api.types.is_bool_dtype(values):
        return "boolean"
    if pd.api.types.is_numeric_dtype(values):
        return "number"
    if pd.api.types.is_datetime64_any_dtype(values):
        return "datetime"
    kinds = {_value_family(v) for v in values}
    return kinds.pop() if len(kinds) == 1 else "mixed"


def _value_family(value: Any) -> str:
    import numpy as np

    if isinstance(value, bool | np.bool_):
        return "boolean"
    if isinstance(value, int | float | np.integer | np.floating):
        return "number"
    if isinstance(value, pd.Timestamp | np.datetime64):
        return "datetime"
    return "text"


def _mostly_numbers(series: pd.Series) -> bool:
    from ctpipe.components.steps.validate_data.checks import MOSTLY_NUMERIC

    values = series.dropna()
    return bool(len(values)) and float(pd.to_numeric(values, errors="coerce").notna().mean()) >= MOSTLY_NUMERIC


def mixed_partition_types(data: pd.DataFrame, files: list[Any]) -> list[Finding]:
    """An error per column whose values are of different type families in different partitions (numbers in
    some, text in others): the snapshot holds one type per column, and a model reads one."""
    if PARTITION_COLUMN not in data.columns:
        return []
    files_of: dict[str, list[str]] = {}
    for f in files:
        files_of.setdefault(partition_of(f.path), []).append(f.path)
    found = []
    for col in data.columns:
        series = data[col]
        # Only an object column can hold partitions of different types (one dtype is one type); a column
        # of text alone is the common case, judged in one pass.
        if col in (PARTITION_COLUMN, SPLIT_COLUMN) or series.dtype != object \
                or pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):
            continue
        per_partition = {str(p): _family(s) for p, s in series.groupby(data[PARTITION_COLUMN].to_numpy(), sort=True)}
        families = {f for f in per_partition.values() if f != "empty"}
        if len(families) < 2 or (families == {"number", "text"} and _mostly_numbers(series)):
            continue  # one type; or numbers with stray text, which the numeric check names value by value
        by_family: dict[str, list[str]] = {}
        for partition, family in per_partition.items():
            if family != "empty":
                by_family.setdefault(family, []).extend(files_of.get(partition, [partition]))
        parts = []
        for family, names in sorted(by_family.items(), key=lambda kv: -len(kv[1])):
            rows = data[PARTITION_COLUMN].isin([partition_of(n) for n in names]) & series.notna()
            example = series[rows].iloc[0] if rows.any() else None
            shown = ", ".join(names[:EXAMPLE_FILES]) + (f" and {len(names) - EXAMPLE_FILES} more" if len(names) > EXAMPLE_FILES else "")
            parts.append(f"{family} in {shown} (e.g. {example!r})")
        found.append(Finding(
            check=SCHEMA_ANOMALY, passed=False, severity=ERROR, column=col, source="structure",
            message=(f"schema drift across partitions: column '{col}' is {'; '.join(parts)}. A column must have "
                     "one type in every file: rewrite the files that differ with the column's type (e.g. "
                     "numbers without a currency sign) and run again"),
            observed=f"{len(families)} types: {', '.join(sorted(families))}", expected="one type in every partition"))
    return found


def conversion_finding(err: Exception) -> Finding:
    """The error finding for a value the snapshot writer could not convert (pyarrow's message, named)."""
    text = str(err.args[0]) if len(err.args) == 1 else " ".join(str(a) for a in err.args)
    column = _CONVERSION.search(text)
    value = _VALUE.search(text)
    expected = _EXPECTED.search(text)
    name = column["column"] if column else None
    if value:
        what = f"value {value['value']} ({value['type']}) cannot be stored as {value['target']}"
    elif expected:
        what = expected["what"].lower()
    else:
        what = text[:200]
    where = f"column '{name}'" if name else "a column"
    return Finding(
        check="snapshot_types", passed=False, severity=ERROR, column=name, source="structure",
        message=(f"{where} holds values of more than one type, so the snapshot cannot be written: {what}. Give the "
                 "column one type in every file (the partitions that differ are the ones to rewrite) and run again"),
        observed=f"{type(err).__name__} while writing the snapshot", expected="one type per column")


def conversion_errors() -> tuple[type[Exception], ...]:
    """The exceptions of a value that does not fit its column's type while the snapshot is written."""
    import pyarrow as pa

    return (pa.ArrowInvalid, pa.ArrowTypeError)
