"""The sanity verdict: one result per check, the Markdown report, the MLflow record and the failure message."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.tasks.protocol import CheckResult


@dataclass
class SanityResult:
    """All checks of one run; ``passed`` is False when any error-severity check failed."""

    checks: list[CheckResult] = field(default_factory=list)
    skipped: bool = False
    seconds: float = 0.0
    # How the rows were sampled (rows per class of the train and val samples).
    sample: str = ""

    @property
    def passed(self) -> bool:
        return all(c.passed or c.severity != "error" for c in self.checks)

    @property
    def failures(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed and c.severity == "error"]

    def summary(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "sample": self.sample,
            "checks": {
                c.name: {"passed": c.passed, "value": _json_number(c.value), "threshold": c.threshold,
                         "message": c.message, "severity": c.severity}
                for c in self.checks
            },
        }


def _json_number(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)



def render_report(result: SanityResult, first_batch: dict[str, Any] | None, model: dict[str, Any] | None = None,
                  task_name: str = "") -> str:
    """The Markdown report; ``model`` is the task's ``describe_model`` (the model the checks ran on)."""
    verdict = "SKIPPED" if result.skipped else ("PASSED" if result.passed else "FAILED")
    lines = [f"# Sanity checks: {verdict}", ""]
    if result.skipped:
        return "\n".join(lines + ["sanity.enabled is false: no check ran."]) + "\n"
    lines += [f"{model_line(model or {}, task_name)}; {result.sample}; {result.seconds:.2f} s in all.", "",
              "| check | result | value | threshold | seconds | detail |", "|---|---|---|---|---|---|"]
    for c in result.checks:
        status = "pass" if c.passed else ("**FAIL**" if c.severity == "error" else "warn")
        value = "n/a" if c.value is None else f"{c.value:.4g}"
        lines.append(f"| {c.name} | {status} | {value} | {c.threshold} | {c.seconds:.2f} | {c.message.replace('|', '/')} |")
    if first_batch:
        lines += ["", "## First batch as the model sees it (first 3 rows, decoded)", "",
                  f"Drawn as the trainer draws it: {first_batch['drawn']}. All rows are in the first-batch artifact.",
                  "", "```json"]
        lines += [json.dumps(r) for r in first_batch["rows"][:3]]
        lines += ["```"]
    return "\n".join(lines) + "\n"


def model_line(model: dict[str, Any], task_name: str) -> str:
    """``Model `mlp` (hidden 128, depth 3, ...)``: named by its ``kind`` (else the task), then its settings."""
    name = model.get("kind") or task_name or "model"
    settings = ", ".join(f"{key} {value}" for key, value in model.items() if key != "kind")
    return f"Model `{name}`" + (f" ({settings})" if settings else "")


def log_to_mlflow(tracking_uri: str, run_id: str, result: SanityResult, paths: list[str], config: Config) -> None:
    """Each check's figure as ``sanity.<check>``, the verdict as ``ctpipe.sanity``, the files under ``sanity/``."""
    from ctpipe.components.lib.tracking import RetryPolicy, log_step

    status = "skipped" if result.skipped else ("passed" if result.passed else "failed")
    log_step(tracking_uri, run_id, "sanity",
             metrics={**{f"sanity.{c.name}": c.value for c in result.checks}, "sanity.seconds": result.seconds},
             tags={"ctpipe.sanity": status}, files={f"sanity/{Path(p).name}": p for p in paths if p},
             documents={"sanity/summary.json": result.summary()}, retry=RetryPolicy.of(config.registry))


def write_text(path: str, text: str) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


# The most specific diagnosis first: a NaN or a missing gradient also breaks every training-based check.
DIAGNOSIS_ORDER = ("finite", "loss_oracle", "loss_padding", "gradients_flow", "input_dependence", "unused_inputs",
                   "eval_determinism", "batch_independence", "batch_independence_train_mode", "first_batch_roundtrip",
                   "task_outputs", "oracle_roundtrip", "init_loss_uniform", "init_loss_prior",
                   "overfit_one_batch", "loss_decreases", "beats_zero_input_baseline")


def failure_message(result: SanityResult, report_path: str) -> str:
    """One paragraph: the most specific failed check in full, then the others by name and figure."""
    rank = {name: i for i, name in enumerate(DIAGNOSIS_ORDER)}
    # A task's own checks (Task.extra_checks, e.g. causality) are the most specific diagnosis: named first.
    failed = sorted(result.failures, key=lambda c: rank.get(c.name, -1))
    first = failed[0]
    value = "n/a" if first.value is None else f"{first.value:.4g}"
    text = (f"sanity check '{first.name}' failed before training, so the run stops here: {first.name}: "
            f"{first.message} (value {value}, threshold {first.threshold})")
    if len(failed) > 1:
        others = ", ".join(f"{c.name} ({'n/a' if c.value is None else f'{c.value:.4g}'} vs {c.threshold})"
                           for c in failed[1:])
        text += f". Also failed: {others}"
    return text + f". Full report: {report_path or '(not written)'}."

