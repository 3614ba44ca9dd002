"""The Markdown model card: data, config, metrics with intervals, slices, sanity, blessing, lineage."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import write_report
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import Snapshot
from ctpipe.components.lib.handoffs import NOT_RECORDED, SanityOutcome, ValidationOutcome
from ctpipe.components.tasks.code_identity import describe


@dataclass
class Lineage:
    """Where the candidate comes from: the pipeline run's MLflow run and tags, and the gates' results."""

    mlflow_run_id: str
    tags: dict[str, str] = field(default_factory=dict)
    validation: ValidationOutcome = field(default_factory=lambda: ValidationOutcome(NOT_RECORDED))
    sanity: SanityOutcome = field(default_factory=lambda: SanityOutcome(NOT_RECORDED))


def _num(x: Any) -> str:
    if isinstance(x, float | int) and not isinstance(x, bool):
        return "n/a" if isinstance(x, float) and not math.isfinite(x) else f"{x:.4f}"
    return "n/a" if x is None else str(x)


def _interval_text(d: dict[str, Any] | None) -> str:
    return f"{_num(d['value'])} [{_num(d['low'])}, {_num(d['high'])}]" if d else ""


def _baseline_words(blessing: dict[str, Any]) -> str:
    """What the baseline column is: the task's input-blind predictor, named by the task."""
    name = blessing.get("baseline_name") or "the prior predictor"
    if name == "the prior predictor":
        return "the prior predictor, the class frequencies of these test rows (its argmax is the majority class)"
    return name


def _label_line(schema: Any) -> str:
    if schema.label is None:
        return "- label: none (the task needs no label)"
    if not schema.classes:
        return f"- label: `{schema.label}`, a real number (no classes)"
    return f"- label: `{schema.label}`; classes: {', '.join(schema.classes)}"


def _metrics_table(blessing: dict[str, Any], confidence: float) -> list[str]:
    cand = blessing["candidate_metrics"]
    champ = blessing.get("champion_metrics") or {}
    intervals = blessing.get("intervals") or {}
    diffs = blessing.get("differences") or {}
    base = blessing.get("baseline_metrics") or {}
    base_diffs = blessing.get("baseline_differences") or {}
    linear = blessing.get("linear_metrics") or {}
    linear_diffs = blessing.get("linear_differences") or {}
    ci = f"{confidence:.0%} CI"
    lines = [
        f"| metric | candidate [{ci}] | champion | cand − champ [{ci}, paired] | baseline | "
        f"cand − baseline [{ci}, paired] | linear | cand − linear [{ci}, paired] | vs champion |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, value in cand.items():
        iv = intervals.get(name, {})
        d = diffs.get(name)
        noise = ""
        if d:
            noise = "within noise" if d["low"] <= 0 <= d["high"] else "beyond noise"
        lines.append(
            f"| {name} | {_num(value)} [{_num(iv.get('low'))}, {_num(iv.get('high'))}] | {_num(champ.get(name))} | "
            f"{_interval_text(d)} | {_num(base.get(name))} | {_interval_text(base_diffs.get(name))} | "
            f"{_num(linear.get(name))} | {_interval_text(linear_diffs.get(name))} | {noise} |"
        )
    return lines


def _per_class_table(blessing: dict[str, Any]) -> list[str]:
    """Each class's test rows, predicted rows, recall and precision (class-probability tasks)."""
    figures = blessing.get("per_class") or []
    if not figures:
        return ["not a class-probability task"]
    lines = ["| class | test rows | predicted rows | recall | precision |", "|---|---|---|---|---|"]
    lines += [f"| {f['class']} | {f['test_rows']} | {f['predicted_rows']} | {_num(f['recall'])} | {_num(f['precision'])} |"
              for f in figures]
    return lines + [f"- warning: {w}" for w in blessing.get("warnings") or []]


def _slices_table(slices: list[dict[str, Any]]) -> list[str]:
    if not slices:
        return ["No slices configured (`evaluate.slices`)."]
    metrics = list(slices[0]["candidate"].keys())
    head = " | ".join(f"{m} (cand / champ)" for m in metrics)
    lines = [f"| slice | rows | {head} | verdict |", "|---|---|" + "---|" * len(metrics) + "---|"]
    for s in slices:
        champ = s.get("champion") or {}
        cells = " | ".join(f"{_num(s['candidate'][m])} / {_num(champ.get(m))}" for m in metrics)
        verdict = (
            "BLOCKS: " + "; ".join(s["failed"])
            if s["blocking"]
            else ("ok" if s["judged"] else "too few rows to judge")
        )
        lines.append(f"| {s['slice']} | {s['rows']} | {cells} | {verdict} |")
    return lines


def _split_lines(split: dict[str, Any] | None, check: dict[str, Any] | None) -> list[str]:
    lines = []
    if split:
        by = f"key `{split['key']}`" if split.get("key") else "row content"
        lines.append(
            f"- training split: by {by}, salt `{split['salt']}`, val/test fractions {split['val_fraction']}/"
            f"{split['test_fraction']} ({split['canonical_form']}); {split['train_rows']} training rows, key digest "
            f"`{split['train_keys_sha256'][:16]}`"
        )
    if check:
        lines.append(f"- champion's training rows in this test split: {check['message']}")
    return lines


def _sanity_lines(sanity: SanityOutcome) -> list[str]:
    """The sanity gate's verdict, then each check's figure and outcome (from the sanity summary JSON)."""
    if sanity.status == NOT_RECORDED:
        return ["- (no sanity results recorded)"]
    lines = [f"- gate: {sanity.status}" + (f" in {sanity.seconds:.2f} s" if sanity.seconds is not None else "")]
    for name, check in sorted(sanity.checks.items()):
        outcome = "pass" if check.get("passed") else ("FAIL" if check.get("severity") == "error" else "warn")
        lines.append(f"- {name}: {_num(check.get('value'))} ({outcome}; threshold {check.get('threshold', '')})")
    return lines


def _task_code_lines(blessing: dict[str, Any]) -> list[str]:
    """The candidate's task code, and whether the champion is scored with the code it was trained with."""
    code = blessing.get("task_code")
    lines = [f"- task code: {describe(code) if code else 'not recorded'}"]
    champion = blessing.get("champion_task_code")
    if champion:
        lines.append(f"- champion's task code: {champion['note'] or 'the code it was trained with'}")
    return lines


def _model(blessing: dict[str, Any], config: Config, snapshot: Snapshot) -> dict[str, Any]:
    """The candidate's model as its task describes it: the blessing's record, else the configured task's view."""
    if blessing.get("model_config"):
        return blessing["model_config"]
    from ctpipe.components.tasks import load_task

    return load_task(config.task).describe_model(config, snapshot.state)


def _confusion(blessing: dict[str, Any]) -> list[str]:
    names = blessing["class_names"]
    lines = ["| true \\ predicted | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for name, row in zip(names, blessing["confusion_matrix"], strict=True):
        lines.append(f"| {name} | " + " | ".join(str(v) for v in row) + " |")
    return lines


def _prediction_drift_line(blessing: dict[str, Any], champion: str | None) -> str:
    from ctpipe.components.lib.drift.prediction_drift import describe

    drift = blessing.get("prediction_drift")
    if blessing.get("prediction_reference") is None:
        return "not judged: this task's predictions are neither class probabilities nor one value a row"
    if drift is None:
        return ("not judged: no champion" if champion is None else
                f"not judged: champion version {champion} kept no summary of its own test predictions")
    return describe(drift)


def write_model_card(
    path: str | Path, *, blessing: dict[str, Any], snapshot: Snapshot, config: Config, lineage: Lineage
) -> str:
    """Write the model card as Markdown at ``path``; return the path to show a person (with ``.md``)."""
    fingerprint_meta = json.loads((snapshot.root / "fingerprint.json").read_text())
    tags = lineage.tags
    verdict = "**BLESSED**" if blessing["blessed"] else "**NOT blessed**"
    champion = blessing.get("champion_version")
    meta = blessing.get("model_metadata") or {}
    lines = [
        f"# Model card: {config.registry.model_name}",
        "",
        f"Verdict: {verdict} — compared against champion {'version ' + champion if champion else '(none: first model)'}.",
        "",
        "## Blessing and its reasons",
        *[f"- {r}" for r in blessing["reasons"]],
        "",
        "## Metrics on the test split",
        f"{blessing['test_rows']} test rows; candidate and champion each scored with the preprocessing statistics "
        f"it was trained with; the baseline is {_baseline_words(blessing)}; linear is "
        f"{blessing.get('linear_name') or 'not fitted (see the reasons)'} on the candidate's encoded features, fitted on "
        "train. Intervals by paired bootstrap (the same "
        f"{config.evaluate.bootstrap_samples} resamples of the rows for every model); the rules are in docs/gates.md, "
        "\"Gates and their statistics\".",
        "",
        *_metrics_table(blessing, config.evaluate.confidence),
        "",
        "### Confusion matrix (candidate)",
        *_confusion(blessing),
        "",
        "### Per class (candidate)",
        *_per_class_table(blessing),
        "",
        "## Slices",
        *_slices_table(blessing.get("slices") or []),
        "",
        "## Drift of the predictions",
        f"- {_prediction_drift_line(blessing, champion)}",
        "",
        "## Data",
        f"- data URI: `{snapshot.data_uri}`",
        f"- fingerprint: `{snapshot.fingerprint}`",
        f"- rows per split: {fingerprint_meta.get('rows', {})}",
        _label_line(snapshot.schema),
        *([f"- text column: `{snapshot.schema.text_column}`"] if snapshot.schema.text_column else []),
        *_split_lines(meta.get("split"), blessing.get("champion_split_check")),
        f"- numeric features: {', '.join(snapshot.schema.numeric) or '-'}",
        f"- categorical features: {', '.join(snapshot.schema.categorical) or '-'}",
        "",
        "## Training and selection",
        f"- task: `{json.dumps(blessing.get('task') or {'name': config.task.name, 'entrypoint': config.task.entrypoint})}`",
        f"- model: `{json.dumps(_model(blessing, config, snapshot))}`",
        *_task_code_lines(blessing),
        f"- selected checkpoint: {json.dumps(meta, default=str)}",
        "",
        "## Sanity checks",
        *_sanity_lines(lineage.sanity),
        "",
        "## Lineage",
        f"- MLflow run: `{lineage.mlflow_run_id}`",
        f"- pipeline run: `{tags.get('ctpipe.pipeline_run_id', '')}`; trigger: `{tags.get('ctpipe.trigger', '')}`",
        f"- git commit: `{tags.get('ctpipe.git_commit', '') or 'unknown'}`",
        f"- model file sha256: `{blessing.get('model_sha256', '')}`",
        f"- data validation: {lineage.validation.status} with {len(lineage.validation.warnings)} warning(s)"
        " (listed in the validation report)",
        "",
        "## Blessing thresholds",
        "```json",
        json.dumps(blessing.get("thresholds", {}), indent=2),
        "```",
        "",
        "<details><summary>Full config</summary>",
        "",
        "```json",
        json.dumps(config.to_dict(), indent=2, sort_keys=True),
        "```",
        "</details>",
        "",
    ]
    return write_report(path, "\n".join(lines), ".md")
