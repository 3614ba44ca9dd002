"""What validation found: one record per check, with its severity, figures and example bad rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

ERROR = "error"
WARNING = "warning"
# A column new, dropped, or of another kind than the reference (champion's) schema says (as TFX's anomalies).
SCHEMA_ANOMALY = "schema_anomaly"
# Rows shown with a finding.
EXAMPLES = 5


@dataclass
class Finding:
    """The outcome of one check: a GX expectation or one of the checks around the suite."""

    check: str
    passed: bool
    severity: str = ERROR
    column: str | None = None
    message: str = ""
    observed: str = ""
    expected: str = ""
    examples: list[dict[str, Any]] = field(default_factory=list)
    # Where the check comes from: "suite" (GX), "structure", "data" (checks beyond the suite), "config"
    # (a setting the data cannot serve, e.g. train.batch_size above the rows per worker).
    source: str = "data"
    # The check does not apply to this run (e.g. a label check for a task with no label): reported as
    # such, counted neither as passed nor as failed.
    not_applicable: bool = False

    @property
    def is_error(self) -> bool:
        return not self.passed and self.severity == ERROR

    @property
    def is_warning(self) -> bool:
        return not self.passed and self.severity != ERROR

    def headline(self) -> str:
        """One line naming the check, the column and what was observed versus expected."""
        where = f" on column '{self.column}'" if self.column else ""
        text = self.message or f"{self.check}{where}"
        if self.observed or self.expected:
            text += f" (observed {self.observed or '?'}; expected {self.expected or '?'})"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_error]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.is_warning]


# The checks about the label (``structure``: nulls, classes; the suite's label expectations; ``data``:
# one feature predicting it), named for a run whose task needs no label (``Task.needs_label``).
LABEL_CHECKS = (
    ("label_not_null", "structure", "every row has a label"),
    ("label_classes", "structure", "the label has at least two classes, each with enough rows"),
    ("label_expectations", "suite", "the label's value set, class count and class distribution (GX)"),
    ("label_leakage", "data", "no single feature predicts the label"),
)


def label_checks_not_applicable(task_name: str) -> list[Finding]:
    """The label checks, each reported "not applicable (task has no label)" instead of silently skipped."""
    return [Finding(check=check, passed=True, severity=ERROR, source=source, not_applicable=True,
                    message=f"{what}: not applicable (task has no label): '{task_name}' needs none, data.label is ignored")
            for check, source, what in LABEL_CHECKS]


def example_rows(frame: pd.DataFrame, mask: pd.Series | np.ndarray, columns: list[str]) -> list[dict[str, Any]]:
    """Up to EXAMPLES rows where ``mask`` holds, as {row, column: value} records for a report."""
    picked = frame.loc[np.asarray(mask), [c for c in columns if c in frame.columns]].head(EXAMPLES)
    out = []
    for idx, row in picked.iterrows():
        rec: dict[str, Any] = {"row": int(idx) if isinstance(idx, int | np.integer) else str(idx)}
        rec.update({str(k): (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()})
        out.append(rec)
    return out
