"""The summary of a local run: each step's outcome and timing, read from the step records, and its text.

``build_summary`` reads the records the steps write (``ctpipe.components.lib.kfp_support.step_status``) into the
run's ``summary.json``; ``format_summary`` is what ``ctpipe run`` prints at the end.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config
from ctpipe.components.lib.credentials import redact_text, redact_uri


def write_summary(run_dir: Path, summary: dict[str, Any]) -> Path:
    """Write the run's ``summary.json`` whole (a full disk leaves none, never an empty one); return its path."""
    path = Path(run_dir) / "summary.json"
    summary["summary_path"] = str(path.resolve())
    atomic_write_text(path, json.dumps(summary, indent=2, default=str))
    return path


def read_step_records(status_dir: Path) -> dict[str, dict[str, Any]]:
    """Every step record under ``status_dir`` by step name (a torn or unreadable one is left out)."""
    records = {}
    for path in status_dir.glob("*.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            records[path.stem] = json.loads(path.read_text())
    return records


def build_summary(
    status_dir: Path,
    *,
    run_dir: Path,
    data_uri: str,
    config: Config,
    tracking_uri: str,
    trigger: str,
    seconds: float,
    runner_error: str | None,
    total_seconds: float | None = None,
    setup_seconds: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """The run's summary from the step records: statuses, selection, metrics, blessing, registration.

    ``seconds`` is the pipeline's own time; ``total_seconds`` the ``ctpipe`` process's, from its start
    (CLI, demo data and MLflow set-up included), against which ``timing`` puts the steps' compute;
    ``setup_seconds`` are the parts before the pipeline starts (CLI start, demo data, MLflow set-up).
    """
    from ctpipe.pipelines.continuous_training import step_names

    STEP_NAMES = step_names(config)  # noqa: N806 (the pipeline's steps: with tune when it has one)
    records = read_step_records(status_dir)
    steps = {}
    for step in STEP_NAMES:
        status = records.get(step, {}).get("status")
        steps[step] = {"passed": "passed", "failed": "failed", "running": "failed", "cached": "cached"}.get(status, "skipped")
    result = {step: records.get(step, {}).get("result", {}) for step in (*STEP_NAMES, "tune")}
    failed = [s for s in STEP_NAMES if steps[s] == "failed"]
    succeeded = all(steps[s] in ("passed", "cached") for s in STEP_NAMES) and runner_error is None
    error = None
    if failed:
        rec = records[failed[0]]
        error = {
            "step": failed[0],
            "message": rec.get("error") or "the step did not finish (see pipeline.log)",
            "user_error": bool(rec.get("user_error")),
            "type": rec.get("error_type"),
        }
    elif runner_error:
        error = {"step": None, "message": runner_error, "user_error": False}
    evaluation = result["evaluate"]
    registration = result["register"]
    return {
        "status": "succeeded" if succeeded else "failed",
        "run_id": result["prepare_run"].get("pipeline_run_id") or run_dir.name,
        "run_dir": str(run_dir.resolve()),
        "trigger": trigger,
        "data_uri": data_uri,
        # Validation's, or (validate taken from the cache) prepare_run's: the same fingerprint of the content,
        # the input of KFP's cache key, so a cached run records the data it stands for too.
        "data_fingerprint": result["validate_data"].get("fingerprint") or result["prepare_run"].get("data_fingerprint"),
        "cached_steps": [s for s in STEP_NAMES if steps[s] == "cached"],
        "rows": result["validate_data"].get("rows"),
        "validation_warnings": result["validate_data"].get("warnings", []),
        # The reports a person opens, each with its extension (KFP's own output files have none).
        "validation_page": result["validate_data"].get("data_docs"),
        "model_card": result["evaluate"].get("model_card"),
        "steps": steps,
        "step_seconds": {s: records[s].get("seconds") for s in STEP_NAMES if s in records},
        "step_timing": {s: records[s]["timing"] for s in STEP_NAMES if records.get(s, {}).get("timing")},
        "timing": {
            **run_timing(records, seconds if total_seconds is None else total_seconds),
            "setup": dict(setup_seconds or {}),
        },
        "seconds": round(seconds, 2),
        "sanity": result["sanity_checks"],
        # The search (tune.trials > 0): one record per trial and the chosen values (components/steps/tune).
        **({"tune": result["tune"]} if "tune" in STEP_NAMES else {}),
        "training": result["train"],
        "selected_checkpoint_step": result["select_checkpoint"].get("step"),
        "selected_checkpoint_metric": {
            "name": result["select_checkpoint"].get("metric"),
            "value": result["select_checkpoint"].get("value"),
        },
        "metrics": {
            "candidate": evaluation.get("candidate_metrics"),
            "champion": evaluation.get("champion_metrics"),
        },
        "blessed": evaluation.get("blessed"),
        "blessing_reasons": evaluation.get("reasons", []),
        "compared_with_champion_version": evaluation.get("champion_version"),
        "model_name": config.registry.model_name,
        "model_version": registration.get("version"),
        # The data the version was trained on (its ctpipe.data_fingerprint): a cached rerun's version may be older.
        "model_data_fingerprint": registration.get("data_fingerprint"),
        "aliases": registration.get("aliases", []),
        "promoted": registration.get("promoted"),
        # False when this candidate (the same model file) was already a version: nothing new was registered.
        "registered_new_version": registration.get("created"),
        # register's one sentence for the decision (promoted or kept, on which interval): as the registry has it
        "decision": registration.get("decision"),
        "promotion_reason": registration.get("promotion_reason"),
        # Whether the logged model served its test rows as evaluated in a fresh process (infra validation).
        "servable": registration.get("servable"),
        "serving_check": registration.get("serving_check"),
        "mlflow_tracking_uri": tracking_uri,
        "mlflow_run_id": result["prepare_run"].get("mlflow_run_id"),
        "mlflow_experiment_id": result["prepare_run"].get("mlflow_experiment_id"),
        # Where validate..select logged (with caching: the run of this data, config and code).
        "training_mlflow_run_id": result["prepare_run"].get("training_run_id"),
        "error": error,
    }


def run_timing(records: dict[str, dict[str, Any]], total_seconds: float) -> dict[str, float]:
    """Orchestration against compute: everything but the steps' own compute is orchestration.

    That is process starts, imports, the KFP local runner between steps, the CLI's own start, the
    demo data and the MLflow set-up (each step's split is in its record's ``timing``).
    """
    compute = sum((r.get("timing") or {}).get("compute_seconds") or 0.0 for r in records.values())
    orchestration = max(total_seconds - compute, 0.0)
    # From the rounded figures, so that the printed total, compute and orchestration add up.
    total_cs, compute_cs = round(total_seconds, 2), round(compute, 2)
    return {
        "total_seconds": total_cs,
        "compute_seconds": compute_cs,
        "orchestration_seconds": round(max(total_cs - compute_cs, 0.0), 2),
        "orchestration_share": round(orchestration / total_seconds, 3) if total_seconds > 0 else 0.0,
    }


def format_summary(summary: dict[str, Any]) -> str:
    """A human-readable end-of-run summary."""
    lines = ["", f"ctpipe run {summary['run_id']}: {summary['status'].upper()} in {summary['seconds']:.0f}s"]
    for step, status in summary["steps"].items():
        secs = summary["step_seconds"].get(step)
        split = summary.get("step_timing", {}).get(step)
        lines.append(
            f"  {step:<18} {status:<8}"
            + (f" {secs:6.1f}s" if secs is not None else "")
            + (f"  (compute {split['compute_seconds']:.1f}s, overhead {split['overhead_seconds']:.1f}s)" if split else "")
        )
    timing = summary.get("timing")
    if timing:
        lines.append(
            f"  orchestration      {timing['orchestration_seconds']:.1f}s of {timing['total_seconds']:.1f}s "
            f"({timing['orchestration_share']:.0%}: process starts, imports, KFP runner, MLflow set-up)"
        )
    if summary.get("cached_steps"):
        lines.append(f"  from cache         {', '.join(summary['cached_steps'])} (data, config and code unchanged; "
                     "--set pipeline.caching=false reruns them)")
    lines += _tune_lines(summary.get("tune"))
    if summary.get("data_fingerprint"):
        lines.append(f"  data fingerprint   {summary['data_fingerprint'][:16]}…  rows {summary.get('rows')}")
    if summary.get("selected_checkpoint_step") is not None:
        m = summary["selected_checkpoint_metric"]
        lines.append(f"  chosen checkpoint  step {summary['selected_checkpoint_step']} ({m['name']} = {m['value']:.4f})")
    metrics = summary["metrics"]
    if metrics.get("candidate"):
        lines.append("  candidate metrics  " + _fmt_metrics(metrics["candidate"]))
        if metrics.get("champion"):
            lines.append(
                f"  champion v{summary['compared_with_champion_version']}  " + _fmt_metrics(metrics["champion"])
            )
        else:
            lines.append("  champion           none yet (first model: judged on value thresholds only)")
    if summary.get("decision"):
        lines.append(f"  decision           {summary['decision']}")
    if summary.get("blessed") is not None:
        lines.append(f"  blessed            {'yes' if summary['blessed'] else 'no'}")
        for reason in summary.get("blessing_reasons", []):
            lines.append(f"    - {reason}")
    if summary.get("model_version"):
        aliases = ", ".join(summary.get("aliases") or []) or "none"
        if summary.get("registered_new_version") is False:
            lines.append(f"  registered         nothing new: this model is already {summary['model_name']} version "
                         f"{summary['model_version']} (aliases: {aliases})")
        else:
            lines.append(f"  registered         {summary['model_name']} version {summary['model_version']} (aliases: {aliases})")
        if summary.get("servable") is not None:
            verdict = "yes" if summary["servable"] else "NO: the champion was not moved to it"
            lines.append(f"  servable           {verdict} ({summary.get('serving_check')})")
    if summary.get("validation_page"):
        lines.append(f"  validation page    {summary['validation_page']}")
    if summary.get("model_card"):
        lines.append(f"  model card         {summary['model_card']}")
    if summary.get("error"):
        where = f" in step {summary['error']['step']}" if summary["error"]["step"] else ""
        lines.append(f"\nerror{where}: {redact_text(str(summary['error']['message']))}")
        lines.append("Nothing was promoted: the champion is unchanged.")
    uri = redact_uri(summary["mlflow_tracking_uri"])  # printed: no userinfo, no query values
    lines.append(f"\nMLflow UI: mlflow ui --backend-store-uri {uri} --port 5000, then open {mlflow_ui_url(summary)}")
    lines.append(f"pipeline log: {Path(summary['run_dir']) / 'pipeline.log'}")
    return "\n".join(lines)


def _tune_lines(tune: dict[str, Any] | None) -> list[str]:
    """The search's lines: trials, the chosen values against the configured ones, boundary warnings, the report."""
    if not tune or not tune.get("trials"):
        return []
    chosen, metric = tune.get("chosen") or {}, tune.get("metric")
    counts = ", ".join(f"{sum(t['status'] == s for t in tune['trials'])} {s}" for s in ("succeeded", "diverged", "gate_failed", "failed")
                       if any(t["status"] == s for t in tune["trials"]))
    lines = [f"  tuned              {len(tune['trials'])} trials ({counts})"]
    if chosen:
        values = ", ".join(f"{k}={v}" for k, v in chosen["values"].items()) or "the configured values"
        base = tune.get("baseline_objective")
        lines.append(f"    chosen trial {chosen['trial']}: {values} ({metric} {chosen['objective']:.4f}"
                     + (f"; configured values {base:.4f})" if isinstance(base, int | float) else ")"))
    lines += [f"    WARNING: {w}" for w in tune.get("boundary_warnings", [])]
    if tune.get("report"):
        lines.append(f"    report: {tune['report']}")
    return lines


def mlflow_ui_url(summary: dict[str, Any], base: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI page of this run's experiment, on its training runs (MLflow 3 opens on GenAI traces
    unless the page asks for the machine-learning view)."""
    experiment = summary.get("mlflow_experiment_id")
    if not experiment:
        return base
    return f"{base}/#/experiments/{experiment}/runs?workflowType=machine_learning"


def _fmt_metrics(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, int | float) else f"{k}={v}" for k, v in sorted(metrics.items()))
