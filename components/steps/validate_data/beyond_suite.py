"""Which of the label and layout checks beyond the suite a run gets, and what each is handed.

The checks themselves are plain functions, one module each: ``feature_checks`` (a feature predicts the label as
classes), ``leakage_continuous`` (a feature predicts a real-valued label: held-out R²), ``leakage_per_class`` (a
feature reveals one class: one-vs-rest AUC), ``label_shares`` (a class vanishes or doubles in one partition) and
``image_layout`` (a partition's images written in another orientation). Leakage is judged pooled and within each
partition; a column found leaking pooled is not reported again per partition or per class.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.snapshot import PARTITION_COLUMN, Schema
from ctpipe.components.steps.validate_data import feature_checks
from ctpipe.components.steps.validate_data.findings import Finding
from ctpipe.components.steps.validate_data.image_layout import check_image_layout, layout_columns
from ctpipe.components.steps.validate_data.label_shares import (
    check_label_shares,
    partition_label_counts,
    reference_label_shares,
)
from ctpipe.components.steps.validate_data.leakage_continuous import (
    check_continuous_label_leakage,
    check_continuous_label_leakage_per_partition,
)
from ctpipe.components.steps.validate_data.leakage_per_class import (
    check_one_class_leakage,
    check_one_class_leakage_per_partition,
)


def label_findings(data: pd.DataFrame, schema: Schema, label_kind: str, threshold: float, *,
                   reference_suite: dict[str, Any] | None, weights: np.ndarray | None = None) -> list[Finding]:
    """Leakage (pooled and per partition; for classes also per class) and, for classes, the label's shares per
    partition against the other partitions and ``reference_suite``'s label distribution (the champion's or a
    reviewed suite; None when the suite was profiled from this data). ``weights``: the rows each sampled row
    stands for (a streamed validation's sample)."""
    if label_kind == "continuous":
        pooled = check_continuous_label_leakage(data, schema, threshold)
        leaks = {f.column for f in pooled if not f.passed}
        return pooled + check_continuous_label_leakage_per_partition(data, schema, threshold, PARTITION_COLUMN,
                                                                     pooled_leaks=leaks)
    pooled = feature_checks.check_label_leakage(data, schema, threshold)
    leaks = {f.column for f in pooled if not f.passed}
    found = pooled + feature_checks.check_label_leakage_per_partition(data, schema, threshold, PARTITION_COLUMN,
                                                                      pooled_leaks=leaks)
    leaks |= {f.column for f in found if not f.passed}
    one_class = check_one_class_leakage(data, schema, threshold, already=leaks)
    leaks |= {f.column for f in one_class if not f.passed}
    found += one_class + check_one_class_leakage_per_partition(data, schema, threshold, PARTITION_COLUMN,
                                                               already=leaks)
    counts = partition_label_counts(data[schema.label], data[PARTITION_COLUMN], weights)
    return found + check_label_shares(counts, reference_label_shares(reference_suite, schema.label), schema.label)


def layout_findings(data: pd.DataFrame, schema: Schema, task: Any, reference_stats: dict[str, Any] | None) -> list[Finding]:
    """The image layout of each partition (``image_layout``), from the task's drift columns when they hold a
    layout profile (``IMAGE__row_I`` / ``IMAGE__col_J``), against the other partitions and the champion's
    reference means of those columns."""
    if data.empty or not layout_columns(task.profile.drift_columns(data.iloc[:1], schema).columns):
        return []
    profiles = task.profile.drift_columns(data, schema)
    numeric = (reference_stats or {}).get("numeric") or {}
    means = {c: numeric[c].get("mean") for c in profiles.columns if c in numeric}
    return check_image_layout(profiles, data[PARTITION_COLUMN], means or None)
