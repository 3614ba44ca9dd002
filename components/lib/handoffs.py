"""Read the results validation and sanity hand on as files: ``validation.json`` and the sanity summary JSON.

Validation writes ``validation.json`` into the snapshot it produces; sanity writes its summary JSON
beside its report (the ``sanity_summary`` artifact). Evaluation (for the model card) and registration
(for the lineage tags) read them here: never back from MLflow, never from a Markdown table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The validation verdict, inside the snapshot directory (components/steps/validate_data/validate.py writes it).
VALIDATION_FILE = "validation.json"
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class ValidationOutcome:
    """The validation verdict: ``passed``/``failed`` (or ``not recorded``) and each warning as "column: message"."""

    status: str
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SanityOutcome:
    """The sanity gate: ``passed``/``failed``/``skipped`` (or ``not recorded``), each check, and its seconds."""

    status: str
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float | None = None

    def figures(self) -> dict[str, float]:
        """Each check's finite figure, and ``seconds``, by name in sorted order (the ``ctpipe.sanity`` tag's)."""
        values = {name: check.get("value") for name, check in self.checks.items()}
        values["seconds"] = self.seconds
        return {k: float(v) for k, v in sorted(values.items()) if v is not None and math.isfinite(float(v))}


def read_validation(snapshot_dir: str | Path) -> ValidationOutcome:
    """The verdict in ``<snapshot_dir>/validation.json``; ``not recorded`` when the snapshot has none."""
    summary = _read_json(Path(snapshot_dir) / VALIDATION_FILE)
    if summary is None:
        return ValidationOutcome(NOT_RECORDED)
    warnings = [
        f"{f['column']}: {f['message']}" if f.get("column") else f["message"]
        for f in summary.get("findings", [])
        if not f["passed"] and f["severity"] != "error"
    ]
    return ValidationOutcome("passed" if summary["passed"] else "failed", warnings)


def read_sanity(summary_path: str | Path | None) -> SanityOutcome:
    """The sanity summary at ``summary_path`` (``SanityResult.summary()``); ``not recorded`` without one."""
    summary = _read_json(Path(summary_path)) if summary_path else None
    if summary is None:
        return SanityOutcome(NOT_RECORDED)
    status = "skipped" if summary.get("skipped") else ("passed" if summary["passed"] else "failed")
    return SanityOutcome(status, dict(summary.get("checks", {})), summary.get("seconds"))


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"step result '{path}' is not valid JSON ({err}); the step that wrote it was cut short, "
                         "run the pipeline again") from None
    if not isinstance(value, dict):
        raise ValueError(f"step result '{path}' must hold a JSON object, got {type(value).__name__}")
    return value
