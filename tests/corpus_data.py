"""A corpus of broken datasets, built in a temp dir from the demo generator (no binary data in git).

Each case mutates clean demo partitions the way real exports go wrong. ``CASES`` says, for each, whether
it is judged against a reviewed reference suite, which step must stop it and what the message names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from components.data.demo import write_demo_data

DAYS = 3
ROWS_PER_DAY = 300
KEY = "customer_id"


def write_clean(root: Path, *, days: int = DAYS, rows_per_day: int = ROWS_PER_DAY, seed: int = 0) -> Path:
    write_demo_data(root, days=days, rows_per_day=rows_per_day, seed=seed)
    return root


def partitions(root: Path) -> list[Path]:
    return sorted(root.glob("date=*/part-0.parquet"))


def _edit_all(root: Path, edit: Callable[[pd.DataFrame, np.random.Generator], pd.DataFrame]) -> None:
    rng = np.random.default_rng(7)
    for part in partitions(root):
        edit(pd.read_parquet(part), rng).to_parquet(part, index=False)


def _edit_last(root: Path, edit: Callable[[pd.DataFrame, np.random.Generator], pd.DataFrame]) -> None:
    part = partitions(root)[-1]
    edit(pd.read_parquet(part), np.random.default_rng(7)).to_parquet(part, index=False)


def missing_column(root: Path) -> None:
    _edit_all(root, lambda f, _: f.drop(columns=["satisfaction"]))


def wrong_type(root: Path) -> None:
    def edit(f, _):
        f["satisfaction"] = np.where(f["satisfaction"] > 3.5, "high", "low")
        return f

    _edit_all(root, edit)


def nulls_in_required_column(root: Path) -> None:
    def edit(f, rng):
        f.loc[rng.random(len(f)) < 0.2, "tenure_months"] = np.nan
        return f

    _edit_last(root, edit)


def out_of_range(root: Path) -> None:
    def edit(f, rng):
        f.loc[rng.random(len(f)) < 0.1, "monthly_spend"] = -500.0
        return f

    _edit_last(root, edit)


def unseen_category(root: Path) -> None:
    def edit(f, rng):
        f.loc[rng.random(len(f)) < 0.1, "region"] = "mars"
        return f

    _edit_last(root, edit)


def empty_partition(root: Path) -> None:
    frame = pd.read_parquet(partitions(root)[0]).iloc[:0]
    target = root / "date=2026-02-01" / "part-0.parquet"
    target.parent.mkdir(parents=True)
    frame.to_parquet(target, index=False)


def corrupt_parquet(root: Path) -> None:
    part = partitions(root)[1]
    part.write_bytes(b"PAR1" + b"\x00garbage" * 100)


def label_leaked_into_feature(root: Path) -> None:
    codes = {"churn": 0, "downgrade": 1, "stay": 2, "upgrade": 3}

    def edit(f, rng):
        f["account_status_code"] = f["label"].map(codes).astype("float64") + rng.normal(0, 0.05, len(f))
        return f

    _edit_all(root, edit)


def all_labels_one_class(root: Path) -> None:
    def edit(f, _):
        f["label"] = "stay"
        return f

    _edit_all(root, edit)


def shuffled_labels(root: Path) -> None:
    def edit(f, rng):
        f["label"] = rng.permutation(f["label"].to_numpy())
        return f

    _edit_all(root, edit)


def duplicated_rows_across_splits(root: Path) -> None:
    def edit(f, _):
        copies = f.sample(frac=0.3, random_state=1).copy()
        copies[KEY] = copies[KEY] + 50_000_000  # re-keyed copies hash into other splits
        return pd.concat([f, copies], ignore_index=True)

    _edit_all(root, edit)


def stray_text_in_numeric_column(root: Path) -> None:
    def edit(f, _):
        # One partition exported the column as text (Parquet holds one type per column), with stray words.
        f["tenure_months"] = f["tenure_months"].astype(str)
        f.loc[f.index[:5], "tenure_months"] = "twelve"
        return f

    _edit_last(root, edit)


def text_in_a_csv_number_column(root: Path) -> None:
    """A partition delivered as CSV whose numeric column has a typed-in word."""
    part = partitions(root)[-1]
    frame = pd.read_parquet(part)
    frame["monthly_spend"] = frame["monthly_spend"].astype(str)
    frame.loc[frame.index[3], "monthly_spend"] = "about 40"
    part.unlink()
    frame.to_csv(part.with_suffix(".csv"), index=False)


@dataclass(frozen=True)
class Case:
    """A broken dataset, the step that must stop it and the words its message must contain."""

    name: str
    mutate: Callable[[Path], None]
    with_reference: bool
    step: str  # "validate_data" or "sanity_checks"
    needles: tuple[str, ...]


CASES = [
    Case("missing column", missing_column, True, "validate_data", ("'satisfaction'", "missing")),
    Case("wrong type", wrong_type, True, "validate_data", ("'satisfaction'", "should be numeric", "reference suite")),
    Case("stray text in a numeric column", stray_text_in_numeric_column, False, "validate_data",
         ("'tenure_months'", "should be numeric", "twelve")),
    Case("text in a CSV number column", text_in_a_csv_number_column, False, "validate_data",
         ("'monthly_spend'", "should be numeric", "about 40")),
    Case("nulls in a required column", nulls_in_required_column, True, "validate_data",
         ("not be null", "'tenure_months'")),
    Case("out-of-range values", out_of_range, True, "validate_data", ("between", "'monthly_spend'")),
    Case("unseen category", unseen_category, True, "validate_data", ("in set", "'region'", "unexpected")),
    Case("empty partition", empty_partition, False, "validate_data", ("hold no rows", "date=2026-02-01")),
    Case("corrupt parquet", corrupt_parquet, False, "validate_data", ("cannot be read as parquet", "date=2026-01-02")),
    Case("label leaked into a feature", label_leaked_into_feature, False, "validate_data",
         ("label leakage", "'account_status_code'")),
    Case("all labels one class", all_labels_one_class, False, "validate_data", ("same label 'stay'", "two classes")),
    Case("duplicated rows across splits", duplicated_rows_across_splits, False, "validate_data",
         ("duplicate the features and label",)),
    Case("shuffled labels", shuffled_labels, False, "sanity_checks", ("beats_zero_input_baseline",)),
]
