"""Whether the champion was trained on rows of the current test split (then comparing on it is unfair).

Every export records how its training rows were chosen (``metadata["split"]``: key, salt, fractions,
canonical form, the partitions its data had, a digest of its training keys). A row's split is a pure
function of its canonical key and those settings, so the current test rows that the champion could have
trained on are exactly those, among its partitions, that its settings put in "train". With the same
settings there are none; with another salt, other fractions or another key there usually are, and the
champion's measured test metrics would be inflated by memorised rows.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from ctpipe.components.lib.data.snapshot import PARTITION_COLUMN, Schema
from ctpipe.components.lib.data.splits import CANONICAL_FORM, KNOWN_FORMS, SplitSettings, split_keys
from ctpipe.components.lib.errors import DataValidationError


@dataclass
class OverlapCheck:
    """The verdict on the champion's training rows against the current test split."""

    ok: bool
    message: str
    overlap_rows: int | None = None
    test_rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def champion_training_overlap(
    record: dict[str, Any] | None, test: pd.DataFrame, schema: Schema, *, version: str
) -> OverlapCheck:
    """Count the current test rows that the champion (``record`` from its export) trained on."""
    counter = OverlapCounter(record, list(test.columns), schema, version=version)
    counter.add(test)
    return counter.verdict()


class OverlapCounter:
    """``champion_training_overlap`` over a test split streamed in record batches: ``add`` each, then
    ``verdict``. A row's split depends on that row alone, so the counts of the batches add up exactly."""

    def __init__(self, record: dict[str, Any] | None, columns: list[str], schema: Schema, *, version: str) -> None:
        self.record, self.schema, self.version = record, schema, version
        self.rows = self.overlap = 0
        self.refusal = _refusal(record, columns, version)
        self.settings = SplitSettings.from_dict(record) if self.refusal is None else None

    def add(self, test: pd.DataFrame) -> None:
        self.rows += len(test)
        if self.refusal is not None or self.settings is None:
            return
        rows = test
        if PARTITION_COLUMN in test.columns and self.record.get("partitions") is not None:
            rows = test[test[PARTITION_COLUMN].isin(self.record["partitions"])]  # newer partitions were never seen
        key = self.settings.key
        try:
            keys = split_keys(rows, Schema(label=self.schema.label, key=key, numeric=[], categorical=[], classes=[]),
                              form=self.settings.canonical_form)  # the form the champion's split was hashed by
        except DataValidationError as err:
            self.refusal = (f"champion version {self.version} is not compared: its training rows cannot be "
                            f"recomputed on this test split: {err}")
            return
        self.overlap += int((self.settings.assign(keys) == "train").sum())

    def verdict(self) -> OverlapCheck:
        if self.refusal is not None:
            return OverlapCheck(False, self.refusal)
        settings, overlap, n, version = self.settings, self.overlap, self.rows, self.version
        if overlap:
            return OverlapCheck(
                False,
                f"champion version {version} is not compared: {overlap} of the {n} rows of this test split "
                f"({overlap / max(n, 1):.1%}) were its training rows (its split: key {settings.key!r}, salt "
                f"{settings.salt!r}, val/test fractions {settings.val_fraction}/{settings.test_fraction}), so its "
                "test metrics would be inflated by memorised rows. Keep data.key, data.split_salt and the "
                "fractions fixed across runs, or compare by hand",
                overlap,
                n,
            )
        return OverlapCheck(True, f"none of the {n} test rows was a training row of champion version {version}", 0, n)


def _refusal(record: dict[str, Any] | None, columns: list[str], version: str) -> str | None:
    """Why the champion's training rows cannot be recomputed at all (before any row is looked at), or None."""
    refuse = f"champion version {version} is not compared: "
    if not record:
        return refuse + ("its export records no training split (it predates split records), so whether it "
                         "trained on rows of this test split cannot be checked")
    settings = SplitSettings.from_dict(record)
    if settings.canonical_form not in KNOWN_FORMS:
        return refuse + (f"its split was hashed with '{settings.canonical_form}', this ctpipe knows "
                         f"{', '.join(repr(f) for f in KNOWN_FORMS)} (it uses '{CANONICAL_FORM}'), so its "
                         "training rows cannot be recomputed")
    if settings.key is not None and settings.key not in columns:
        return refuse + (f"its split was keyed by column '{settings.key}', which this test split does not have, "
                         "so its training rows cannot be recomputed")
    return None
