"""Split gate cases: real partitions (Parquet/CSV) read and split by the pipeline's own functions.

Healthy cases append a partition that stores its values differently (a null in an integer column, the
key as float64, strings as category/object, float32, a new column, a partition as CSV) and count the
old rows that changed split, and split the same rows with datetime columns from Parquet and from CSV;
``blocked`` is "rows moved or the split refused healthy data". Broken cases
are a null key and a key repeated with another label (``blocked``: the split raised a data error), and
champions whose training rows are in today's test split (another salt, other fractions, no split record;
``blocked``: evaluation refuses to compare against it), beside one with the same settings (healthy).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.simulate import mixed_type_rows, write_partition
from ctpipe.components.lib.data.snapshot import (
    PARTITION_COLUMN,
    assign_splits,
    infer_schema,
    list_data_files,
    read_data,
    split_keys,
)
from ctpipe.components.lib.data.splits import SplitSettings
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.steps.evaluate.leakage import champion_training_overlap

SALT, VAL, TEST = "gates", 0.1, 0.2


def _split(root: Path, key: str | None) -> tuple[pd.DataFrame, pd.Series]:
    data = read_data(str(root), list_data_files(str(root)))
    schema = infer_schema(data, label="label", key=key, features=[], categorical=[])
    return data, assign_splits(split_keys(data, schema), val_fraction=VAL, test_fraction=TEST, salt=SALT)


def _moved(tmp: Path, old: pd.DataFrame, new: pd.DataFrame, key: str | None, fmt: str = "parquet") -> int:
    write_partition(tmp / "before", "2026-01-01", old)
    write_partition(tmp / "after", "2026-01-01", old)
    write_partition(tmp / "after", "2026-01-02", new, fmt)
    _, before = _split(tmp / "before", key)
    data, after = _split(tmp / "after", key)
    after = after[(data[PARTITION_COLUMN] == "date=2026-01-01").to_numpy()].reset_index(drop=True)
    return int((before.reset_index(drop=True) != after).sum())


def _null_int(f: pd.DataFrame) -> pd.DataFrame:
    f = f.astype({"tickets": "float64"})
    f.loc[0, "tickets"] = np.nan
    return f


EVOLUTIONS = {
    "a null in an integer column": _null_int,
    "the key stored as float64": lambda f: f.astype({"customer_id": "float64"}),
    "strings as category": lambda f: f.astype({"region": "category", "label": "category"}),
    "strings as object": lambda f: f.astype({"region": object}),
    "float32 and int32": lambda f: f.astype({"ratio": "float32", "tickets": "int32"}),
    "a new column": lambda f: f.assign(plan=np.where(np.arange(len(f)) % 2 == 0, "pro", "free")),
}


def _healthy(name: str, tmp: Path, old, new, key, fmt="parquet") -> dict:
    try:
        moved = _moved(tmp, old, new, key, fmt)
        detail = f"{moved} of {len(old)} old rows changed split"
    except DataValidationError as err:
        moved, detail = -1, f"refused healthy data: {err}"
    label = f"new partition with {name} ({'key ' + key if key else 'content hash'})"
    return {"name": label, "gate": "split", "expected_block": False, "blocked": moved != 0, "detail": detail}


def _with_datetimes(frame: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    day = pd.Timestamp("2025-01-01") + pd.to_timedelta(rng.integers(0, 400, len(frame)), unit="D")
    moment = pd.Timestamp("2025-01-01") + pd.to_timedelta(rng.integers(0, 10**9, len(frame)), unit="ms")
    return frame.assign(signup_day=day, last_seen=moment)


def _same_rows_as_csv(tmp: Path, rows: pd.DataFrame) -> dict:
    """The same rows, with datetime columns, from Parquet and from CSV (where datetimes are ISO text)."""
    write_partition(tmp / "parquet", "2026-01-01", rows)
    write_partition(tmp / "csv", "2026-01-01", rows, "csv")
    (_, from_parquet), (_, from_csv) = _split(tmp / "parquet", None), _split(tmp / "csv", None)
    moved = int((from_parquet != from_csv).sum())
    return {"name": "the same rows with datetime columns as CSV instead of Parquet (content hash)", "gate": "split",
            "expected_block": False, "blocked": moved != 0, "detail": f"{moved} of {len(rows)} rows split differently"}


def _data_error(name: str, frame: pd.DataFrame) -> dict:
    frame = frame.assign(**{PARTITION_COLUMN: "date=2026-01-03"})
    schema = infer_schema(frame, label="label", key="customer_id", features=[], categorical=[])
    try:
        split_keys(frame, schema)
        blocked, detail = False, "accepted"
    except DataValidationError as err:
        blocked, detail = True, str(err)[:200]
    return {"name": name, "gate": "split", "expected_block": True, "blocked": blocked, "detail": detail}


def _champion(name: str, expected_block: bool, record: dict | None, test: pd.DataFrame, schema) -> dict:
    check = champion_training_overlap(record, test, schema, version="1")
    return {"name": name, "gate": "split", "expected_block": expected_block, "blocked": not check.ok,
            "detail": check.message[:220]}


def cases(seed: int) -> list[dict]:
    rng = np.random.default_rng([20, seed])
    out = []
    with tempfile.TemporaryDirectory(prefix="ctpipe-gates-splits-") as tmp_dir:
        tmp = Path(tmp_dir)
        old = mixed_type_rows(rng, 400, 0)
        for key in (None, "customer_id"):
            for i, (name, change) in enumerate(EVOLUTIONS.items()):
                out.append(_healthy(name, tmp / f"{key}-{i}", old, change(mixed_type_rows(rng, 100, 10_000)), key))
        out.append(_healthy("CSV instead of Parquet", tmp / "csv", old, mixed_type_rows(rng, 100, 20_000), None, "csv"))
        out.append(_same_rows_as_csv(tmp / "dated", _with_datetimes(old, rng)))

        null_key = mixed_type_rows(rng, 50, 30_000).astype({"customer_id": "float64"})
        null_key.loc[[3, 17], "customer_id"] = np.nan
        out.append(_data_error("a null key", null_key))
        conflict = mixed_type_rows(rng, 50, 40_000)
        conflict.loc[5, "customer_id"] = conflict.loc[4, "customer_id"]
        conflict.loc[5, "label"] = "b" if conflict.loc[4, "label"] == "a" else "a"
        out.append(_data_error("a key repeated with another label", conflict))

        write_partition(tmp / "today", "2026-01-01", old)
        data, splits = _split(tmp / "today", "customer_id")
        test = data[(splits == "test").to_numpy()]
        schema = infer_schema(data, label="label", key="customer_id", features=[], categorical=[])
        record = {"partitions": ["date=2026-01-01"]}
        same = SplitSettings(key="customer_id", salt=SALT, val_fraction=VAL, test_fraction=TEST)
        out.append(_champion("champion with the same split settings", False, {**same.to_dict(), **record}, test, schema))
        content = SplitSettings(key=None, salt=SALT, val_fraction=VAL, test_fraction=TEST)
        out.append(_champion("champion split by content, not by key", True, {**content.to_dict(), **record}, test, schema))
        salted = SplitSettings(key="customer_id", salt="another", val_fraction=VAL, test_fraction=TEST)
        out.append(_champion("champion split with another salt", True, {**salted.to_dict(), **record}, test, schema))
        # Its train region began at 0.15 of the hash range, today's test region ends at 0.2: they overlap.
        smaller = SplitSettings(key="customer_id", salt=SALT, val_fraction=0.05, test_fraction=0.1)
        out.append(_champion("champion with smaller val/test fractions", True, {**smaller.to_dict(), **record}, test,
                             schema))
        out.append(_champion("champion without a split record", True, None, test, schema))
    return out
