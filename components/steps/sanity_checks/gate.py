"""The sanity gate: sample the snapshot, run the checks, dump the first batch, report; stop on a hard failure.

    result = run_sanity_checks(snapshot_dir, config, report_path="sanity.md", first_batch_path="first_batch.json",
                               summary_path="sanity_summary.json", tracking_uri="", mlflow_run_id="")
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.lib.handoffs import SanitySummary, write_record
from ctpipe.components.steps.sanity_checks.checks import check_model
from ctpipe.components.steps.sanity_checks.first_batch import check_first_batch_roundtrip
from ctpipe.components.steps.sanity_checks.oracle_roundtrip import check_oracle_roundtrip
from ctpipe.components.steps.sanity_checks.report import (
    SanityResult,
    failure_message,
    log_to_mlflow,
    render_report,
    write_text,
)
from ctpipe.components.steps.sanity_checks.sample import load_sanity_data
from ctpipe.components.steps.sanity_checks.short_training import LossFn
from ctpipe.components.steps.sanity_checks.task_outputs import check_task_outputs


def run_sanity_checks(
    snapshot_dir: str, config: Config, *, report_path: str, first_batch_path: str, tracking_uri: str,
    mlflow_run_id: str, summary_path: str = "", model_factory: Callable[[], Any] | None = None,
    loss_fn: LossFn | None = None,
) -> SanityResult:
    """Run the checks on the configured model (or ``model_factory``) and a sample of the snapshot.

    Writes the Markdown report, the first batch and (with ``summary_path``) the summary JSON that
    evaluation and registration read, logs them to the MLflow run, and raises ``SanityCheckError`` when
    a hard check failed.
    """
    started = time.perf_counter()
    if not config.sanity.enabled:
        result = SanityResult(skipped=True)
        write_text(report_path, render_report(result, None))
        write_text(first_batch_path, json.dumps({"skipped": True}))
        write_summary(summary_path, result)
        log_to_mlflow(tracking_uri, mlflow_run_id, result, [report_path], config)
        return result
    import torch

    from ctpipe.components.tasks import load_task

    task = load_task(config.task)
    snapshot = load_snapshot(snapshot_dir)
    data = load_sanity_data(snapshot, config, task)

    def default_factory():
        return task.model.build(config, snapshot.state)

    build = model_factory or default_factory

    def seeded_factory():
        torch.manual_seed(config.train.seed)  # every check starts from the same initial weights
        return build()

    first = data.first_batch
    check_selection_metric(seeded_factory(), first.examples, config, task)
    described = task.checks.describe_batch(first.examples, first.raw, snapshot.state, snapshot.schema)
    dump = {"drawn": first.drawn, **{k: v for k, v in described.items() if k != "drawn"}}
    write_text(first_batch_path, json.dumps(dump, indent=1, default=str))
    checks = [check_first_batch_roundtrip(dump, task.checks.batch_mismatches(dump, first.raw, snapshot.schema))]
    # Tiny models: one thread is as fast, and far faster when the CPU is shared (2 threads spin-wait; the task
    # outputs check generates text token by token: 10x slower on two threads of a busy 2-core machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        checks.append(check_task_outputs(task, seeded_factory(), first.raw, snapshot.state,
                                         snapshot.schema.all_features))
        checks.append(check_oracle_roundtrip(task, seeded_factory(), first.raw, snapshot.state))
        checks += check_model(seeded_factory, data, config, task, loss_fn=loss_fn)
    finally:
        torch.set_num_threads(threads)
    result = SanityResult(checks=checks, seconds=time.perf_counter() - started, sample=data.drawn)
    model = task.describe_model(config, snapshot.state)
    write_text(report_path, render_report(result, dump, model, task.name))
    write_summary(summary_path, result)
    log_to_mlflow(tracking_uri, mlflow_run_id, result, [report_path, first_batch_path], config)
    if not result.passed:
        raise SanityCheckError(failure_message(result, report_path))
    return result


def write_summary(summary_path: str, result: SanityResult) -> None:
    """The summary evaluation and registration read (``lib/handoffs.SanitySummary``), when a path is given."""
    if summary_path:
        write_record(summary_path, SanitySummary(**result.summary()))


def check_selection_metric(model: Any, batch: Any, config: Config, task: Any) -> None:
    """ConfigError unless ``select.metric`` is one the trainer's validation reports (the row metrics found by
    scoring one batch): stopped here, before the sanity checks, as the trainer also does before its first step."""
    import torch

    from ctpipe.components.tasks import check_selection_metric as check

    model.eval()
    with torch.no_grad():
        names = task.objective.row_metrics(model(*batch.inputs), batch.targets)
    check(task, config.select.metric, names)
