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

from components.data.snapshot import PARTITION_COLUMN, Schema
from components.data.splits import CANONICAL_FORM, SplitSettings, split_keys
from components.errors import DataValidationError


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
    refuse = f"champion version {version} is not compared: "
    if not record:
        return OverlapCheck(False, refuse + "its export records no training split (it predates split records), so "
                            "whether it trained on rows of this test split cannot be checked")
    settings = SplitSettings.from_dict(record)
    if settings.canonical_form != CANONICAL_FORM:
        return OverlapCheck(False, refuse + f"its split was hashed with '{settings.canonical_form}', this ctpipe "
                            f"uses '{CANONICAL_FORM}', so its training rows cannot be recomputed")
    if settings.key is not None and settings.key not in test.columns:
        return OverlapCheck(False, refuse + f"its split was keyed by column '{settings.key}', which this test split "
                            "does not have, so its training rows cannot be recomputed")
    rows = test
    if PARTITION_COLUMN in test.columns and record.get("partitions") is not None:
        rows = test[test[PARTITION_COLUMN].isin(record["partitions"])]  # newer partitions were never seen
    try:
        keys = split_keys(rows, Schema(label=schema.label, key=settings.key, numeric=[], categorical=[], classes=[]))
    except DataValidationError as err:
        return OverlapCheck(False, refuse + f"its training rows cannot be recomputed on this test split: {err}")
    overlap = int((settings.assign(keys) == "train").sum())
    if overlap:
        return OverlapCheck(
            False,
            refuse + f"{overlap} of the {len(test)} rows of this test split ({overlap / max(len(test), 1):.1%}) were "
            f"its training rows (its split: key {settings.key!r}, salt {settings.salt!r}, val/test fractions "
            f"{settings.val_fraction}/{settings.test_fraction}), so its test metrics would be inflated by "
            "memorised rows. Keep data.key, data.split_salt and the fractions fixed across runs, or compare by hand",
            overlap,
            len(test),
        )
    return OverlapCheck(True, f"none of the {len(test)} test rows was a training row of champion version {version}",
                        0, len(test))
