"""Run the whole pipeline on this machine with KFP's local runner, and summarise it.

The same compiled-for-cluster pipeline runs through ``kfp.local.SubprocessRunner(use_venv=False)``:
each step is a subprocess of this interpreter, training launches its ranks with the local launcher,
and MLflow tracks into SQLite under the ctpipe home. Steps record their outcome in the run's folder
(``components.kfp_support.step_status``), which is how the summary knows what passed, failed or was
skipped, and why.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from components.config import TRIGGERS, Config, load_config
from components.errors import ConfigError
from components.kfp_support import STATUS_DIR_ENV

DEMO_KEY_COLUMN = "customer_id"
STEP_TITLES = {
    "prepare_run": "prepare run (config, MLflow run)",
    "validate_data": "validate data (fingerprint, splits, Great Expectations)",
    "sanity_checks": "sanity checks (init loss, overfit one batch, ...)",
    "train": "train (FSDP2, torch.distributed)",
    "select_checkpoint": "select best checkpoint",
    "evaluate": "evaluate against champion",
    "register": "register in MLflow",
}


def default_home() -> Path:
    """The ctpipe home: $CTPIPE_HOME, else ./.ctpipe."""
    return Path(os.environ.get("CTPIPE_HOME") or ".ctpipe")


def ensure_demo_data(home: Path) -> str:
    """Generate the demo dataset under the home once; return its path."""
    from components.data.demo import write_demo_data

    root = home / "data"
    if not any(root.glob("date=*/part-0.parquet")):
        write_demo_data(root)
    return str(root.resolve())


def ensure_demo_data_for(home: Path, config) -> tuple[str, list[str]]:
    """The configured task's demo data under the home (its ``write_demo_data``, else the tabular demo)
    and the config settings that go with it (the key column; the task's ``demo_settings``)."""
    from components.tasks import load_task

    task = load_task(config.task)
    writer = getattr(task, "write_demo_data", None)
    if writer is None:
        return ensure_demo_data(home), ([f"data.key={DEMO_KEY_COLUMN}"] if config.data.key is None else [])
    root = home / f"data-{task.name}"
    if not any(root.glob("date=*/part-0.parquet")):
        writer(str(root))
    return str(root.resolve()), list(getattr(task, "demo_settings", ()))


def _new_run_dir(home: Path) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S")
    run_dir = home / "runs" / f"{stamp}-{os.getpid()}"
    run_dir.mkdir(parents=True, exist_ok=False)
    return run_dir


def _read_status(status_dir: Path) -> dict[str, dict[str, Any]]:
    records = {}
    for path in status_dir.glob("*.json"):
        with contextlib.suppress(OSError, json.JSONDecodeError):
            records[path.stem] = json.loads(path.read_text())
    return records


class _Progress:
    """Prints one line per step as it starts and ends, from the status records the steps write."""

    def __init__(self, status_dir: Path, out, quiet: bool) -> None:
        self.status_dir = status_dir
        self.out = out
        self.quiet = quiet
        self.seen: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _emit(self, text: str) -> None:
        if not self.quiet:
            self.out.write(text + "\n")
            self.out.flush()

    def poll(self) -> None:
        from pipelines.continuous_training import STEP_NAMES

        records = _read_status(self.status_dir)
        for index, step in enumerate(STEP_NAMES, start=1):
            status = records.get(step, {}).get("status")
            if status is None or self.seen.get(step) == status:
                continue
            self.seen[step] = status
            label = f"[{index}/{len(STEP_NAMES)}] {STEP_TITLES[step]}"
            if status == "running":
                self._emit(f"{label} ...")
            else:
                seconds = records[step].get("seconds", 0.0)
                mark = "passed" if status == "passed" else "FAILED"
                self._emit(f"{label}: {mark} in {seconds:.1f}s")

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            self.poll()

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.poll()


@contextlib.contextmanager
def _output_to(log_path: Path) -> Iterator[Any]:
    """Send this process's (and its children's) stdout/stderr to a log; yield a writer to the terminal."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    terminal = os.fdopen(os.dup(saved_out), "w", buffering=1)
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield terminal
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved_out, 1)
            os.dup2(saved_err, 2)
            os.close(saved_out)
            os.close(saved_err)
            terminal.close()


def _preflight(config: Config, data_uri: str) -> None:
    """Cheap checks that give a clear error before any subprocess starts."""
    from components.data.snapshot import list_data_files
    from components.tasks import load_task

    load_task(config.task)  # the task's module imports and its factory returns a complete task
    list_data_files(data_uri, with_hashes=False)


def run_local(
    *,
    home: str | Path | None = None,
    data_uri: str | None = None,
    config_path: str | None = None,
    overrides: list[str] | None = None,
    trigger: str = "manual",
    quiet: bool = False,
    process_started: float | None = None,
) -> dict[str, Any]:
    """Run the pipeline locally end to end and return its summary (also written to summary.json).

    ``process_started`` (the ``ctpipe`` process's start, from the CLI) is where the summary's
    ``timing.total_seconds`` counts from; without it, from this call.
    """
    called = time.time()
    if trigger not in TRIGGERS:
        raise ConfigError(f"invalid trigger {trigger!r}; allowed: {', '.join(TRIGGERS)}")
    home_dir = Path(home) if home else default_home()
    overrides = list(overrides or [])
    config = load_config(config_path, overrides)
    home_dir.mkdir(parents=True, exist_ok=True)
    setup = {"cli_start_seconds": round(called - process_started, 3) if process_started else None}
    if data_uri is None:
        clock = time.time()
        data_uri, demo_settings = ensure_demo_data_for(home_dir, config)
        setup["demo_data_seconds"] = round(time.time() - clock, 3)
        unset = [s for s in demo_settings if not any(o.startswith(s.split("=")[0] + "=") for o in overrides)]
        if unset:
            config = load_config(config_path, unset + overrides)
    elif "://" not in data_uri:
        data_uri = str(Path(data_uri).resolve())
    _preflight(config, data_uri)

    from components.tracking import local_tracking_uri

    # No MLflow here: importing it costs the CLI a second or more. The first step (prepare_run) runs
    # alone and creates the SQLite database before any other step writes to it.
    tracking_uri = config.registry.tracking_uri or local_tracking_uri(home_dir)

    run_dir = _new_run_dir(home_dir)
    status_dir = run_dir / "steps"
    status_dir.mkdir()
    started = time.time()
    outcome = _run_pipeline(home_dir, run_dir, status_dir, data_uri, config, tracking_uri, trigger, quiet)
    summary = build_summary(
        status_dir,
        run_dir=run_dir,
        data_uri=data_uri,
        config=config,
        tracking_uri=tracking_uri,
        trigger=trigger,
        seconds=time.time() - started,
        runner_error=outcome,
        total_seconds=time.time() - (process_started or called),
        setup_seconds=setup,
    )
    summary_path = run_dir / "summary.json"
    summary["summary_path"] = str(summary_path.resolve())
    summary_path.write_text(json.dumps(summary, indent=2, default=str))
    return summary


def _run_pipeline(
    home: Path,
    run_dir: Path,
    status_dir: Path,
    data_uri: str,
    config: Config,
    tracking_uri: str,
    trigger: str,
    quiet: bool,
) -> str | None:
    """Run the KFP pipeline with the local runner; its logs go to run_dir/pipeline.log."""
    from kfp import local

    from pipelines.continuous_training import build_pipeline

    pipeline = build_pipeline(None)
    previous = os.environ.get(STATUS_DIR_ENV)
    os.environ[STATUS_DIR_ENV] = str(status_dir.resolve())
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    error = None
    try:
        with _output_to(run_dir / "pipeline.log") as terminal:
            if not quiet:
                terminal.write(f"ctpipe: running the pipeline locally; logs: {run_dir / 'pipeline.log'}\n")
            with _Progress(status_dir, terminal, quiet):
                local.init(
                    local.SubprocessRunner(use_venv=False),
                    pipeline_root=str((home / "pipeline_root").resolve()),
                    raise_on_error=False,
                )
                try:
                    pipeline(
                        data_uri=data_uri,
                        trigger=trigger,
                        config_json=config.to_json(),
                        config_overrides="",
                        mlflow_tracking_uri=tracking_uri,
                    )
                except Exception as err:  # the local runner raising is a failed run, reported in the summary
                    error = f"{type(err).__name__}: {err}"
    finally:
        if previous is None:
            os.environ.pop(STATUS_DIR_ENV, None)
        else:
            os.environ[STATUS_DIR_ENV] = previous
    return error


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
    from pipelines.continuous_training import STEP_NAMES

    records = _read_status(status_dir)
    steps = {}
    for step in STEP_NAMES:
        status = records.get(step, {}).get("status")
        steps[step] = {"passed": "passed", "failed": "failed", "running": "failed"}.get(status, "skipped")
    result = {step: records.get(step, {}).get("result", {}) for step in STEP_NAMES}
    failed = [s for s in STEP_NAMES if steps[s] == "failed"]
    succeeded = all(steps[s] == "passed" for s in STEP_NAMES) and runner_error is None
    error = None
    if failed:
        rec = records[failed[0]]
        error = {
            "step": failed[0],
            "message": rec.get("error") or "the step did not finish (see pipeline.log)",
            "user_error": bool(rec.get("user_error")),
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
        "data_fingerprint": result["validate_data"].get("fingerprint"),
        "rows": result["validate_data"].get("rows"),
        "validation_warnings": result["validate_data"].get("warnings", []),
        "steps": steps,
        "step_seconds": {s: records[s].get("seconds") for s in STEP_NAMES if s in records},
        "step_timing": {s: records[s]["timing"] for s in STEP_NAMES if records.get(s, {}).get("timing")},
        "timing": {
            **run_timing(records, seconds if total_seconds is None else total_seconds),
            "setup": dict(setup_seconds or {}),
        },
        "seconds": round(seconds, 2),
        "sanity": result["sanity_checks"],
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
        "aliases": registration.get("aliases", []),
        "promoted": registration.get("promoted"),
        "mlflow_tracking_uri": tracking_uri,
        "mlflow_run_id": result["prepare_run"].get("mlflow_run_id"),
        "error": error,
    }


def run_timing(records: dict[str, dict[str, Any]], total_seconds: float) -> dict[str, float]:
    """Orchestration against compute: everything but the steps' own compute is orchestration.

    That is process starts, imports, the KFP local runner between steps, the CLI's own start, the
    demo data and the MLflow set-up (each step's split is in its record's ``timing``).
    """
    compute = sum((r.get("timing") or {}).get("compute_seconds") or 0.0 for r in records.values())
    orchestration = max(total_seconds - compute, 0.0)
    return {
        "total_seconds": round(total_seconds, 2),
        "compute_seconds": round(compute, 2),
        "orchestration_seconds": round(orchestration, 2),
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
    if summary.get("blessed") is not None:
        lines.append(f"  blessed            {'yes' if summary['blessed'] else 'no'}")
        for reason in summary.get("blessing_reasons", []):
            lines.append(f"    - {reason}")
    if summary.get("model_version"):
        aliases = ", ".join(summary.get("aliases") or []) or "none"
        lines.append(f"  registered         {summary['model_name']} version {summary['model_version']} (aliases: {aliases})")
    if summary.get("error"):
        where = f" in step {summary['error']['step']}" if summary["error"]["step"] else ""
        lines.append(f"\nerror{where}: {summary['error']['message']}")
        lines.append("Nothing was promoted: the champion is unchanged.")
    uri = summary["mlflow_tracking_uri"]
    lines.append(f"\nMLflow UI: mlflow ui --backend-store-uri {uri} --port 5000  (then open http://127.0.0.1:5000)")
    lines.append(f"pipeline log: {Path(summary['run_dir']) / 'pipeline.log'}")
    return "\n".join(lines)


def _fmt_metrics(metrics: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4f}" if isinstance(v, int | float) else f"{k}={v}" for k, v in sorted(metrics.items()))

