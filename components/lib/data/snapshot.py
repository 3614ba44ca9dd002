"""The snapshot that flows between pipeline steps: reading a data root into its splits, schema and state.

A data root is any fsspec URL (a local path, ``s3://``, ``gs://``) holding Parquet or CSV files,
usually as ``date=YYYY-MM-DD/`` partitions. A *snapshot* is the directory the validation step writes:
the rows split into train/val/test, the inferred schema, the preprocessing statistics (computed on the
train split only) and the fingerprint of the files it was read from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.data.batches import read_csv
from ctpipe.components.lib.data.concat import concat_partitions
from ctpipe.components.lib.data.encoding import (
    label_text,
)
from ctpipe.components.lib.data.files import (
    DATA_SUFFIXES,
    DataFile,
    _fs_and_root,
    fingerprint_files,
    list_data_files,
    partition_of,
)
from ctpipe.components.lib.data.reference_stats import reference_stats_of, table_stats, write_reference_stats
from ctpipe.components.lib.data.split_files import (
    ROW_GROUP_ROWS,
    SplitWriter,
    iter_split_batches,
    split_rows,
    take_rows,
)
from ctpipe.components.lib.data.splits import (
    PARTITION_COLUMN,
    SPLIT_COLUMN,
    SPLITS,
    SplitSettings,
    assign_splits,
    split_keys,
    streamed_keys_digest,
)
from ctpipe.components.lib.data.stream_stats import TableStats
from ctpipe.components.lib.data.task_state import check_task_state
from ctpipe.components.lib.data.window import TrainWindow, window_mask
from ctpipe.components.lib.errors import DataValidationError, UserError

# Re-exported: the files layer lives in files.py, the stable splits in splits.py.
__all__ = ["DataFile", "fingerprint_files", "list_data_files", "PARTITION_COLUMN", "SPLIT_COLUMN", "SPLITS",
           "assign_splits", "split_keys"]


def read_data(data_uri: str, files: list[DataFile], fmt: str = "auto") -> pd.DataFrame:
    """Read every file into one frame with a ``__partition`` column; corrupt files are named."""
    fs, root = _fs_and_root(data_uri)
    base = root if fs.isdir(root) else root.rsplit("/", 1)[0]
    frames = []
    for f in files:
        kind = fmt if fmt != "auto" else DATA_SUFFIXES["." + f.path.rsplit(".", 1)[-1].lower()]
        full = f"{base}/{f.path}" if base else f.path
        try:
            with fs.open(full, "rb") as handle:
                frame = pd.read_parquet(handle) if kind == "parquet" else read_csv(handle)
        except Exception as err:  # pyarrow/pandas raise many types for a damaged file
            raise DataValidationError(
                f"data file '{f.path}' under '{data_uri}' cannot be read as {kind}: {type(err).__name__}: "
                f"{str(err)[:200]}. Replace or remove the file and run again."
            ) from None
        frame[PARTITION_COLUMN] = partition_of(f.path)
        frames.append(frame)
    # Not pd.concat: its common dtype can change values that splits are hashed from (concat.py).
    data = concat_partitions(frames)
    # Hive-style partition keys (date=...) are reconstructed by some readers; they are not features.
    return data


# --- schema ------------------------------------------------------------------------------------


@dataclass
class Schema:
    """What the columns mean: label, key, numeric and categorical features, class names, the text column."""

    # None for a task that needs no label (``Task.needs_label`` false, e.g. a language model).
    label: str | None
    key: str | None
    numeric: list[str]
    categorical: list[str]
    classes: list[str]
    # Feature columns the task decodes itself (an image, a text: ``Task.own_columns``), kept out of the
    # tabular profiling; the task's own expectations check them.
    other: list[str] = field(default_factory=list)
    # ``data.text_column``: the column a text task reads (None: the task's default).
    text_column: str | None = None

    @property
    def features(self) -> list[str]:
        """The tabular feature columns (profiled, drift- and leakage-checked column by column)."""
        return self.numeric + self.categorical

    @property
    def all_features(self) -> list[str]:
        """Every feature column a model reads, the task's own included."""
        return self.numeric + self.categorical + self.other

    def with_task_columns(self, own: list[str]) -> Schema:
        """This schema with the task's ``own`` columns moved out of numeric/categorical into ``other``."""
        if not own:
            return self
        unknown = [c for c in own if c not in self.features and c not in self.other]
        if unknown:
            raise UserError(f"the task reads column(s) {', '.join(unknown)}, which are not feature columns of the data; "
                            f"feature columns: {', '.join(self.all_features)}. Name the task's column as the task says (a text task: "
                            "--set data.text_column=COLUMN)")
        return replace(self, numeric=[c for c in self.numeric if c not in own],
                       categorical=[c for c in self.categorical if c not in own],
                       other=[*self.other, *[c for c in own if c not in self.other]])


def check_named_columns(columns: list[str], *, label: str | None, key: str | None, features: list[str]) -> None:
    """UserError naming the fix when the label, key or a configured feature is not among ``columns``: what the
    data's schema alone shows (``ctpipe run`` checks it on the first file's header before any step starts)."""
    if label is not None and label not in columns:
        raise UserError(
            f"label column '{label}' is not in the data; columns are: {', '.join(map(str, columns))}. "
            "Name the label with --set data.label=COLUMN."
        )
    if key is not None and key not in columns:
        raise UserError(
            f"key column '{key}' is not in the data; columns are: {', '.join(map(str, columns))}. "
            "Name an existing key column with --set data.key=COLUMN, or --set data.key=null to split by row content."
        )
    missing = [c for c in features if c not in columns]
    if missing:
        raise UserError(
            f"configured feature column(s) {', '.join(missing)} are not in the data; columns are: "
            f"{', '.join(map(str, columns))}. Fix data.features."
        )


def infer_schema(data: pd.DataFrame, *, label: str | None, key: str | None, features: list[str],
                 categorical: list[str], text_column: str | None = None, label_kind: str = "classes") -> Schema:
    """Resolve feature columns and their kinds from config, inferring what is not configured.

    ``label`` None: the task needs no label (``ctpipe.components.tasks.registry.label_column``), so there is none
    to find and no classes; ``label_kind`` "continuous" (``Task.label_kind``, a regression): no classes either."""
    columns = [c for c in data.columns if c != PARTITION_COLUMN]
    check_named_columns(columns, label=label, key=key, features=features)
    if features:
        chosen = list(features)
    else:
        skip = {label, key, "date"}
        chosen = [c for c in columns if c not in skip]
    unknown_cat = [c for c in categorical if c not in chosen]
    if unknown_cat:
        raise UserError(f"data.categorical names {', '.join(unknown_cat)}, which are not feature columns")
    numeric, cats = [], []
    for col in chosen:
        series = data[col]
        if col in categorical or not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
            cats.append(col)
        else:
            numeric.append(col)
    if not chosen:
        raise UserError("the data has no feature columns besides the label and key; configure data.features")
    classes = sorted(set(label_text(data[label]).dropna())) if label is not None and label_kind == "classes" else []
    return Schema(label=label, key=key, numeric=numeric, categorical=cats, classes=classes, text_column=text_column)


# --- the snapshot directory ----------------------------------------------------------------------


@dataclass
class Snapshot:
    """A validated, split dataset as written by the validation step.

    ``state`` is what the run's task fitted on the train split (``Task.fit``; for the tabular task the
    preprocessing statistics), stored as ``preprocessing.json``.
    """

    root: Path
    schema: Schema
    state: dict[str, Any]
    fingerprint: str
    data_uri: str
    files: list[DataFile]

    def frame(self, split: str) -> pd.DataFrame:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; one of {SPLITS}")
        return pd.read_parquet(self.root / f"{split}.parquet")

    def batches(self, split: str, *, row_groups: list[int] | None = None) -> Iterator[pd.DataFrame]:
        """The ``split`` rows one Parquet row group at a time (all, or ``row_groups`` in that order)."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; one of {SPLITS}")
        return iter_split_batches(self.root / f"{split}.parquet", row_groups=row_groups)

    def rows(self, split: str) -> int:
        return split_rows(self.root / f"{split}.parquet")


def write_snapshot(
    out_dir: str | Path,
    data: pd.DataFrame,
    splits: pd.Series,
    schema: Schema,
    *,
    data_uri: str,
    files: list[DataFile],
    fingerprint: str,
    task: Any,
    window: TrainWindow | None = None,
    stats: Any = None,
) -> Snapshot:
    """Write the split rows, schema, the task's train-only statistics and fingerprint into ``out_dir``.

    With a ``window`` (data/window.py) only the train rows inside it are written (val and test in full).
    ``task`` (the run's, ``ctpipe.components.tasks``) fits the train-split state (``SnapshotWriter``).
    """
    writer = SnapshotWriter(out_dir, schema, task=task, stats=stats)
    if window is not None and not window.is_all and PARTITION_COLUMN in data.columns:
        is_train = np.asarray(splits) == "train"
        keep = window_mask(data[PARTITION_COLUMN].to_numpy(), is_train, window)
        writer.window = {**window.to_dict(), "excluded_train_rows": int(is_train.sum() - keep.sum()),
                         "partitions": sorted(set(data.loc[keep, PARTITION_COLUMN].tolist()))}
        splits = pd.Series(np.where(is_train & ~keep, "outside_window", np.asarray(splits)), index=data.index)
    writer.add(data, splits)
    return writer.close(data_uri=data_uri, files=files, fingerprint=fingerprint)


class SnapshotWriter:
    """Writes a snapshot batch by batch: split rows as Parquet row groups, train statistics in one pass.

    ``add`` takes any number of record batches (with their splits); ``close`` writes the schema, the
    task's state and the reference statistics of the train rows (``stream_stats``) and the fingerprint.
    The state comes from ``task.codec.fit_streamed`` on the streamed statistics when the task offers it (the
    tabular task: the same numbers as its ``fit``), otherwise from ``task.codec.fit`` on the written train split.
    """

    def __init__(self, out_dir: str | Path, schema: Schema, *, task: Any, row_group_rows: int = ROW_GROUP_ROWS,
                 stats: Any = None) -> None:
        """``stats``: the train split's statistics computed elsewhere (the merged per-partition sketches of
        ``components/lib/sketches/``, a ``TableStats``-like); without them they are streamed from the rows added."""
        self.root, self.schema, self.task = Path(out_dir), schema, task
        self.given_stats = stats
        self.root.mkdir(parents=True, exist_ok=True)
        self.writers = {s: SplitWriter(self.root / f"{s}.parquet", row_group_rows=row_group_rows) for s in SPLITS}
        self.stats = TableStats.for_columns(schema.numeric, schema.categorical)
        self._train_rows = 0  # the train rows seen: the stream position of the next one (its sample priority)
        self._columns: pd.DataFrame | None = None
        # What the training window dropped (recorded in fingerprint.json and in the model's lineage).
        self.window: dict[str, Any] | None = None

    def add(self, batch: pd.DataFrame, splits: pd.Series) -> None:
        keep = [c for c in batch.columns if c != SPLIT_COLUMN]
        if self._columns is None:
            self._columns = batch[keep].iloc[:0]
        split_of = np.asarray(splits)
        for split, writer in self.writers.items():
            mask = split_of == split
            if mask.any():
                part = batch.loc[mask, keep].reset_index(drop=True)
                writer.write(part)
                if split == "train" and self.given_stats is None:
                    self.stats = self.stats.merge(table_stats(part, self.schema, first_row=self._train_rows))
                    self._train_rows += len(part)

    def close(self, *, data_uri: str, files: list[DataFile], fingerprint: str) -> Snapshot:
        columns = self._columns if self._columns is not None else pd.DataFrame()
        for writer in self.writers.values():
            writer.close(columns)
        stats = self.given_stats if self.given_stats is not None else self.stats
        return finish_snapshot(self.root, self.schema, self.task, stats, data_uri=data_uri, files=files,
                               fingerprint=fingerprint, rows={s: w.rows for s, w in self.writers.items()},
                               window=self.window)


def finish_snapshot(root: Path, schema: Schema, task: Any, stats: Any, *, data_uri: str, files: list[DataFile],
                    fingerprint: str, rows: dict[str, int], window: dict[str, Any] | None) -> Snapshot:
    """The snapshot's records once its split files are written (by ``SnapshotWriter``, or by Spark tasks): the
    schema, the task's state, the reference statistics of the train rows (``stats``) and the fingerprint.
    The state comes from ``task.codec.fit_streamed`` on the statistics when the task offers it (the tabular
    task: the same numbers as its ``fit``), otherwise from ``task.codec.fit`` on the written train split."""
    root = Path(root)
    if rows.get("train", 0) == 0:
        raise DataValidationError("the train split is empty: the data has too few rows to split")
    state = task.codec.fit_streamed(stats, schema)
    if state is None:
        # A task that needs the rows themselves (a tokenizer, images) fits on the written train split.
        state = task.codec.fit(pd.read_parquet(root / "train.parquet"), schema)
    check_task_state(task, state)
    atomic_write_text(root / "schema.json", json.dumps(asdict(schema), indent=2))
    atomic_write_text(root / "preprocessing.json", json.dumps(state, indent=2))
    write_reference_stats(root / "reference_stats.json", reference_stats_of(stats))
    meta = {"fingerprint": fingerprint, "data_uri": data_uri, "files": [asdict(f) for f in files], "rows": rows}
    if window is not None:
        meta["train_window"] = window
    atomic_write_text(root / "fingerprint.json", json.dumps(meta, indent=2))
    return Snapshot(root, schema, state, fingerprint, data_uri, files)


def load_snapshot(path: str | Path) -> Snapshot:
    root = Path(path)
    schema = Schema(**json.loads((root / "schema.json").read_text()))
    state = json.loads((root / "preprocessing.json").read_text())
    meta = json.loads((root / "fingerprint.json").read_text())
    files = [DataFile(**f) for f in meta["files"]]
    return Snapshot(root, schema, state, meta["fingerprint"], meta["data_uri"], files)


# --- the split a model is trained on ------------------------------------------------------------


def training_split_record(snapshot: Snapshot, settings: SplitSettings) -> dict[str, Any]:
    """What an exported model records about its training rows: the split settings, the partitions they
    came from, and a digest of their canonical keys. Raises DataValidationError when ``settings`` do not
    reproduce the snapshot's train split (the config does not describe how this snapshot was split)."""
    # A record batch at a time (a row's key and split depend on that row alone), the digest by an external
    # sort. With a key only it and the label are read; without one the whole row is its key.
    key_schema = Schema(label=snapshot.schema.label, key=settings.key, numeric=[], categorical=[], classes=[])
    columns = [c for c in (settings.key, snapshot.schema.label) if c] if settings.key is not None else None
    counts = {"moved": 0, "rows": 0}

    def key_batches() -> Iterator[pd.Series]:
        for batch in iter_split_batches(snapshot.root / "train.parquet", columns=columns):
            keys = split_keys(batch, key_schema)
            counts["moved"] += int((settings.assign(keys) != "train").sum())
            counts["rows"] += len(batch)
            yield keys

    digest = streamed_keys_digest(key_batches())
    moved, rows = counts["moved"], counts["rows"]
    if moved:
        raise DataValidationError(
            f"{moved} of the {rows} train rows of snapshot '{snapshot.root}' are not train rows under the "
            f"split settings {settings.to_dict()}: the config's data.key/split_salt/val_fraction/test_fraction are "
            "not the ones this snapshot was split with (or its rows changed since). Use the config the data was "
            "validated with, or validate the data again."
        )
    window = json.loads((snapshot.root / "fingerprint.json").read_text()).get("train_window") or {}
    partitions = window.get("partitions") or sorted({partition_of(f.path) for f in snapshot.files})
    return {
        **settings.to_dict(),
        "window_days": window.get("window_days"),
        "max_train_rows": window.get("max_train_rows"),
        "partitions": partitions,
        "train_rows": rows,
        "train_keys_sha256": digest,
    }


def first_rows(snapshot: Snapshot, rows: int) -> pd.DataFrame:
    """The first ``rows`` of the test split (of train when test is empty), reading only their row groups:
    a split can be larger than the step's memory."""
    split = "test" if snapshot.rows("test") else "train"
    return take_rows(snapshot.root / f"{split}.parquet", np.arange(min(rows, snapshot.rows(split))))
