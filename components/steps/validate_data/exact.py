"""Exact verdicts for streamed data: the findings a sample cannot decide, recomputed over every row.

When validation streams the data (``components/lib/data/scan.py``), the checks run on a stratified sample.
Some verdicts must not depend on a sample, and are recomputed from the exact figures of the streaming pass: the
table's row count, label nulls, cross-split duplicates, and the suite's column expectations that
column totals decide (``stream_stats.ColumnTotals``): columns exist, null fractions, value sets of text
columns, and numeric ranges when every value is inside (or, with ``mostly`` = 1, any is outside).
A range or value set with ``mostly`` < 1 that the totals cannot decide is judged on the sample with each row
weighted by the rows it stands for (``Scan.weights``), since the sample is not proportional to partitions
or classes. Every other finding keeps its sample verdict and says so in its message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ctpipe.components.lib.data.scan import Scan, duplicate_count
from ctpipe.components.steps.validate_data.findings import ERROR, Finding

ROW_COUNT = "expect_table_row_count_to_be_between"
# Exact from the stream (or from the per-partition table, which is built from exact counts).
EXACT_CHECKS = {ROW_COUNT, "label_not_null", "cross_split_duplicates", "empty_partitions", "train_window",
                "partition_nulls"}
SAMPLED_NOTE = " [judged on the stratified sample]"


def exact_overrides(findings: list[Finding], scan: Scan, suite: dict[str, Any], config) -> list[Finding]:
    """``findings`` with the exact verdicts put in and the sample-based ones labelled."""
    out = []
    kwargs = _column_kwargs(suite)
    for f in findings:
        exact = _column_expectation(f, scan, kwargs.get((f.check, f.column, f.severity))) if f.source == "suite" else None
        if exact is not None:
            f = exact
        elif f.check == ROW_COUNT and f.column is None and f.source == "suite":
            f = _row_count(f, scan.total, suite)
        elif f.check == "label_not_null" and not f.not_applicable:
            continue  # replaced below, from the exact count
        elif f.check == "cross_split_duplicates":
            f = _duplicates(f, scan, config.validation.max_duplicate_fraction)
        elif exact is None and f.check not in EXACT_CHECKS and f.source in ("suite", "data", "structure") \
                and not _partition_table(f):
            f = dataclasses.replace(f, message=f.message + SAMPLED_NOTE)
        out.append(f)
    if scan.label_nulls:
        label = config.data.label
        out.append(Finding(
            check="label_not_null", passed=False, severity=ERROR, column=label, source="structure",
            message=f"{scan.label_nulls} row(s) have no label in column '{label}'; drop or label them",
            observed=f"{scan.label_nulls} nulls", expected="no nulls"))
    return out


def _column_kwargs(suite: dict[str, Any]) -> dict[tuple, dict[str, Any]]:
    from ctpipe.components.steps.validate_data.suite import severity_of

    return {(e.get("type"), (e.get("kwargs") or {}).get("column"), severity_of(e)): e.get("kwargs") or {}
            for e in suite.get("expectations", []) if not (e.get("meta") or {}).get("ctpipe_table")}


def _unexpected(f: Finding, passed: bool, unexpected: int, of: int) -> Finding:
    share = 100.0 * unexpected / of if of else 0.0
    return dataclasses.replace(f, passed=passed, observed=f"{unexpected} of {of} rows ({share:.3g}%) unexpected",
                               examples=f.examples if not passed else [])


def _column_expectation(f: Finding, scan: Scan, kw: dict[str, Any] | None) -> Finding | None:
    """The exact verdict of a column expectation from the column totals, or None when they cannot decide it."""
    if kw is None or f.column is None:
        return None
    totals = scan.columns.get(f.column)
    if f.check == "expect_column_to_exist":
        return dataclasses.replace(f, passed=totals is not None)
    if totals is None or totals.rows == 0:
        return None
    mostly = float(kw.get("mostly") if kw.get("mostly") is not None else 1.0)
    present = totals.rows - totals.nulls
    if f.check == "expect_column_values_to_not_be_null":
        return _unexpected(f, present / totals.rows >= mostly, totals.nulls, totals.rows)
    if f.check == "expect_column_values_to_be_in_set" and not totals.numeric and totals.counts is not None:
        allowed = kw.get("value_set") or []
        if not all(isinstance(v, str) for v in allowed):
            return None
        # Numbers in a text column (a partition writing categories as codes) are in no set of texts, as GX judges
        # them in memory.
        unexpected = sum(n for v, n in totals.counts.items() if v not in set(allowed)) + totals.numeric_values
        return _unexpected(f, present == 0 or (present - unexpected) / present >= mostly, unexpected, present)
    if f.check == "expect_column_values_to_be_between" and totals.numeric and totals.min <= totals.max:
        low, high = kw.get("min_value"), kw.get("max_value")
        inside = (low is None or totals.min >= low) and (high is None or totals.max <= high)
        if inside:
            return _unexpected(f, True, 0, present)
        if mostly >= 1.0:
            return dataclasses.replace(f, passed=False, observed=(
                f"values from {totals.min:.6g} to {totals.max:.6g} (exact over {present} rows); "
                f"on the sample: {f.observed}"))
    if mostly < 1.0 and f.check in ("expect_column_values_to_be_between", "expect_column_values_to_be_in_set"):
        return _weighted_share(f, scan, kw, mostly)
    return None


def _weighted_share(f: Finding, scan: Scan, kw: dict[str, Any], mostly: float) -> Finding | None:
    """A ``mostly`` verdict from the sample with each row weighted by the rows it stands for (``Scan.weights``):
    partitions get equal sample budgets and rare classes a floor, so the sample's own share of unexpected rows
    is not the data's (a big partition's errors were diluted by the small ones)."""
    import numpy as np
    import pandas as pd

    if f.column not in scan.sample.columns or len(scan.weights) != len(scan.sample):
        return None
    values, weights = scan.sample[f.column], scan.weights
    present = values.notna().to_numpy()
    if f.check == "expect_column_values_to_be_in_set":
        inside = values.isin(kw.get("value_set") or []).to_numpy(dtype=bool)
    else:
        numbers = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
        low, high = kw.get("min_value"), kw.get("max_value")
        inside = np.ones(len(numbers), dtype=bool)  # text in a numeric column (NaN here) is outside
        if low is not None:
            inside &= numbers >= low
        if high is not None:
            inside &= numbers <= high
    unexpected = present & ~inside
    total = float(weights[present].sum())
    share = float(weights[unexpected].sum()) / total if total else 0.0
    return dataclasses.replace(f, passed=1.0 - share >= mostly, message=f.message + SAMPLED_NOTE, observed=(
        f"about {100 * share:.3g}% of rows unexpected (weighted estimate: {int(unexpected.sum())} of {int(present.sum())} "
        "sample rows, each weighted by the rows of its partition and label class it stands for)"))


def exact_profile(suite: dict[str, Any], scan: Scan, schema_label: str | None, *, range_margin: float,
                  null_fraction_allowance: float) -> dict[str, Any]:
    """A suite profiled from the sample, with what every train row knows put back: numeric ranges from the
    exact min/max, text value sets from the exact values, null allowances from the exact null fractions."""
    import pandas as pd

    from ctpipe.components.steps.validate_data.suite import (
        ERROR_RANGE_MARGIN,
        MAX_VALUE_SET,
        _range_with_margin,
        severity_of,
    )

    kept = []
    for exp in suite["expectations"]:
        kw, kind = exp.get("kwargs") or {}, exp.get("type")
        totals = scan.train_columns.get(kw.get("column")) if not (exp.get("meta") or {}).get("ctpipe_table") else None
        if totals is None or kw.get("column") == schema_label or totals.rows == 0:
            kept.append(exp)
            continue
        if kind == "expect_column_values_to_be_between" and totals.numeric and totals.finite_min <= totals.finite_max:
            margin = range_margin if severity_of(exp) != ERROR else max(range_margin, ERROR_RANGE_MARGIN)
            # Finite values only, as profiling does: one inf would make the range endless.
            kw["min_value"], kw["max_value"] = _range_with_margin(pd.Series([totals.finite_min, totals.finite_max]),
                                                                  margin)
        elif kind == "expect_column_values_to_be_in_set" and not totals.numeric and not totals.numeric_values \
                and all(isinstance(v, str) for v in kw.get("value_set") or []):
            if totals.counts is None or len(totals.counts) > MAX_VALUE_SET:
                continue  # as profiling does: a set this large is no expectation
            kw["value_set"] = sorted(totals.counts)
        elif kind == "expect_column_values_to_not_be_null" and kw.get("mostly") is not None:
            null_fraction = totals.nulls / totals.rows
            kw["mostly"] = 1.0 if null_fraction == 0 else round(max(0.0, 1.0 - null_fraction - null_fraction_allowance), 6)
        kept.append(exp)
    return {**suite, "expectations": kept}


def _partition_table(f: Finding) -> bool:
    return f.source == "suite" and f.message.startswith("partition row count")


def _row_count(f: Finding, total: int, suite: dict[str, Any]) -> Finding:
    for exp in suite.get("expectations", []):
        if exp.get("type") == ROW_COUNT:
            kw = exp.get("kwargs", {})
            low, high = kw.get("min_value"), kw.get("max_value")
            passed = (low is None or total >= low) and (high is None or total <= high)
            return dataclasses.replace(f, passed=passed, observed=str(total))
    return f


def _duplicates(f: Finding, scan: Scan, max_fraction: float) -> Finding:
    count, held = duplicate_count(scan)
    fraction = count / held if held else 0.0
    failed = count > 0
    return dataclasses.replace(
        f, passed=not failed, severity=ERROR if fraction > max_fraction else "warning",
        message=(f"{count} val/test row(s) ({fraction:.2%}) repeat a row of an earlier split (its features, and its "
                 "label where the task has one), so the evaluation sees training rows; deduplicate the data or key the split by content "
                 "(data.key=null)" if failed else "no row repeats across splits"),
        observed=f"{count} rows ({fraction:.2%})", examples=f.examples if failed else [])
