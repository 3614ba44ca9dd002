"""Exact verdicts for streamed data: the findings a sample cannot decide, recomputed over every row.

When validation streams the data (``components/data/scan.py``), the checks run on a stratified sample.
Some verdicts must not depend on a sample: the table's row count, label nulls and cross-split duplicates are
recomputed from the exact figures of the streaming pass; every other finding of the row checks keeps
its sample verdict and says so in its message.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from components.data.scan import Scan, duplicate_count
from components.validation.findings import ERROR, Finding

ROW_COUNT = "expect_table_row_count_to_be_between"
# Exact from the stream (or from the per-partition table, which is built from exact counts).
EXACT_CHECKS = {ROW_COUNT, "label_not_null", "cross_split_duplicates", "empty_partitions"}
SAMPLED_NOTE = " [judged on the stratified sample]"


def exact_overrides(findings: list[Finding], scan: Scan, suite: dict[str, Any], config) -> list[Finding]:
    """``findings`` with the exact verdicts put in and the sample-based ones labelled."""
    out = []
    for f in findings:
        if f.check == ROW_COUNT and f.column is None and f.source == "suite":
            f = _row_count(f, scan.total, suite)
        elif f.check == "label_not_null":
            continue  # replaced below, from the exact count
        elif f.check == "cross_split_duplicates":
            f = _duplicates(f, scan, config.validation.max_duplicate_fraction)
        elif f.check not in EXACT_CHECKS and f.source in ("suite", "data", "structure") and not _partition_table(f):
            f = dataclasses.replace(f, message=f.message + SAMPLED_NOTE)
        out.append(f)
    if scan.label_nulls:
        label = config.data.label
        out.append(Finding(
            check="label_not_null", passed=False, severity=ERROR, column=label, source="structure",
            message=f"{scan.label_nulls} row(s) have no label in column '{label}'; drop or label them",
            observed=f"{scan.label_nulls} nulls", expected="no nulls"))
    return out


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
        message=(f"{count} val/test row(s) ({fraction:.2%}) duplicate the features and label of a row in an earlier "
                 "split, so the evaluation sees training rows; deduplicate the data or key the split by content "
                 "(data.key=null)" if failed else "no row repeats across splits"),
        observed=f"{count} rows ({fraction:.2%})", examples=f.examples if failed else [])
