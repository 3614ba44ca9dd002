"""The files one step hands to the next: one typed record per file, written and read here only.

| file | written by | read by | record |
|---|---|---|---|
| ``validation.json`` in the snapshot | validate data | evaluate (card), register (tags) | ``ValidationVerdict`` |
| the Spark driver's ``--result`` file | validate data's driver (a SparkApplication) | validate data's step pod | ``ValidationVerdict`` |
| the ``sanity_summary`` artifact | sanity checks | evaluate (card), register (tags) | ``SanitySummary`` |
| the ``model`` artifact's metadata | select checkpoint | the KFP UI, the run summary | ``SelectionRecord`` |
| ``blessing.json`` | evaluate | register | ``Blessing`` (``steps/evaluate``'s fields) |

Every file carries ``format_version``: a reader refuses a newer format than it knows (a step of an older
image reading a newer step's file) instead of misreading it. Never read back from MLflow, never from a
Markdown table.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text

FORMAT_VERSION = 1

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


@dataclass(frozen=True)
class ValidationVerdict:
    """``validation.json``: the data's verdict, every finding with its severity, figures and examples."""

    passed: bool
    data_uri: str
    fingerprint: str
    rows: dict[str, int]
    errors: list[str]
    warnings: list[str]
    findings: list[dict[str, Any]]
    suite_source: str = ""
    judged_on: str = "every row"
    seconds: dict[str, float] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION


@dataclass(frozen=True)
class SanitySummary:
    """The ``sanity_summary`` artifact: the gate's verdict and each check's figure, threshold and message."""

    passed: bool
    skipped: bool = False
    seconds: float = 0.0
    sample: dict[str, Any] | None = None
    checks: dict[str, dict[str, Any]] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class SelectionRecord:
    """The chosen checkpoint, as the exported model artifact's metadata: its step, the metric that chose it,
    that metric's value and the export's SHA-256 (the file itself carries the model and its split)."""

    step: int
    metric: str
    value: float
    sha256: str
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Blessing:
    """``blessing.json``: evaluation's decision, the evidence it rests on, and what registration records."""

    blessed: bool
    reasons: list[str] = field(default_factory=list)
    candidate_metrics: dict[str, float] = field(default_factory=dict)
    champion_metrics: dict[str, float] | None = None
    champion_version: str | None = None
    intervals: dict[str, dict[str, float]] = field(default_factory=dict)
    differences: dict[str, dict[str, float]] | None = None
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    baseline_differences: dict[str, dict[str, float]] = field(default_factory=dict)
    failed_slices: list[dict[str, Any]] = field(default_factory=list)
    test_rows: int = 0
    slices: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    class_names: list[str] | None = None
    baseline_name: str = "the prior predictor"
    confusion_matrix: list[list[int]] | None = None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Metric -> higher is better, as the rules judged it (a task's own metric's name may not say).
    higher_is_better: dict[str, bool] = field(default_factory=dict)
    champion_error: str | None = None
    champion_split_check: dict[str, Any] | None = None
    model_sha256: str = ""
    data_fingerprint: str = ""
    model_metadata: dict[str, Any] = field(default_factory=dict)
    model_config: dict[str, Any] = field(default_factory=dict)
    task: dict[str, Any] = field(default_factory=dict)
    task_code: dict[str, Any] | None = None
    champion_task_code: dict[str, Any] | None = None
    # The candidate's predictions on its test split, summarised (``components/lib/drift/prediction_drift.py``): registration
    # keeps it as the model's reference/predictions.json; and their drift from the champion's reference.
    prediction_reference: dict[str, Any] | None = None
    prediction_drift: dict[str, Any] | None = None
    # The linear baseline beside the trivial one (its name, metrics, candidate - it), each class's figures, and
    # warnings that do not block (a class never predicted).
    linear_name: str | None = None
    linear_metrics: dict[str, float] = field(default_factory=dict)
    linear_differences: dict[str, dict[str, float]] = field(default_factory=dict)
    per_class: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    mlflow_run_id: str = ""
    evaluated_at: str = ""
    seconds: float = 0.0
    format_version: int = FORMAT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def write_blessing(path: str | Path, blessing: Blessing) -> None:
    write_record(path, blessing)


def read_blessing(path: str | Path) -> Blessing:
    """The blessing evaluation wrote at ``path``."""
    value = _read_json(Path(path))
    if value is None:
        raise ValueError(f"step result '{path}' does not exist: evaluation did not finish")
    return record_from(Blessing, value, path)


def write_record(path: str | Path, record: Any) -> None:
    """A hand-off record as JSON, written whole (a reader never sees half a file)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(asdict(record), indent=1, default=_json_value))


def _json_value(value: Any) -> Any:
    """numpy scalars and arrays as plain numbers and lists (and anything else as its text)."""
    for convert in ("to_dict", "tolist", "item"):
        if hasattr(value, convert):
            return getattr(value, convert)()
    return str(value)


def record_from(cls: type, value: dict[str, Any], path: str | Path) -> Any:
    """``value`` as record ``cls``; a format newer than this code knows, or a missing field, is refused."""
    version = value.get("format_version", 0)  # 0: written before records were versioned
    if version > FORMAT_VERSION:
        raise ValueError(f"step result '{path}' has format {version}; this ctpipe reads up to {FORMAT_VERSION}: "
                         "run every step of a pipeline from the same image")
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in value.items() if k in known})
    except TypeError as err:
        raise ValueError(f"step result '{path}' is not a {cls.__name__}: {err}") from None


def write_validation(snapshot_dir: str | Path, verdict: ValidationVerdict) -> None:
    """``<snapshot_dir>/validation.json``."""
    write_record(Path(snapshot_dir) / VALIDATION_FILE, verdict)


def read_verdict(path: str | Path) -> ValidationVerdict:
    """The verdict record at ``path`` (the Spark driver's result record); a missing file is an error."""
    value = _read_json(Path(path))
    if value is None:
        raise ValueError(f"step result '{path}' does not exist: the validation driver did not finish")
    return record_from(ValidationVerdict, value, path)


def read_validation(snapshot_dir: str | Path) -> ValidationOutcome:
    """The verdict in ``<snapshot_dir>/validation.json``; ``not recorded`` when the snapshot has none."""
    path = Path(snapshot_dir) / VALIDATION_FILE
    value = _read_json(path)
    if value is None:
        return ValidationOutcome(NOT_RECORDED)
    summary = asdict(record_from(ValidationVerdict, value, path))
    warnings = [
        f"{f['column']}: {f['message']}" if f.get("column") else f["message"]
        for f in summary.get("findings", [])
        if not f["passed"] and f["severity"] != "error"
    ]
    return ValidationOutcome("passed" if summary["passed"] else "failed", warnings)


def read_sanity(summary_path: str | Path | None) -> SanityOutcome:
    """The sanity summary at ``summary_path`` (a ``SanitySummary``); ``not recorded`` without one."""
    value = _read_json(Path(summary_path)) if summary_path else None
    if value is None:
        return SanityOutcome(NOT_RECORDED)
    summary = record_from(SanitySummary, value, summary_path)
    status = "skipped" if summary.skipped else ("passed" if summary.passed else "failed")
    return SanityOutcome(status, dict(summary.checks), summary.seconds)


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
