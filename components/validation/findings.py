"""What validation found: one record per check, with its severity, figures and example bad rows."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ERROR = "error"
WARNING = "warning"
# A column new, dropped, or of another kind than the reference (champion's) schema says (as TFX's anomalies).
SCHEMA_ANOMALY = "schema_anomaly"


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
    # Where the check comes from: "suite" (GX), "structure", "data" (checks beyond the suite).
    source: str = "data"

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
