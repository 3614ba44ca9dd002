"""What keeps the watcher's files and the prediction log bounded over a year unattended.

    tidied = tidy(config, reports_dir, now)   # {"reports_deleted": [...], "prediction_log_deleted": [...]}

The reports folder keeps the newest ``watch.keep_reports`` drift reports and as many decay reports (a report is
its JSON and its page, which go together); the prediction log loses the ``date=`` partitions served more than
``serving.prediction_log_retention_days`` ago, a bound the config holds above what the decay check reads. A
failure to delete is reported in the decision, never fatal to the check.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.credentials import redact_text

REPORT_KINDS = ("drift-", "decay-")


def tidy(config: Config, reports_dir: Path, now: float, *, dry_run: bool = False) -> dict[str, Any]:
    """Prune the reports folder and, when one is configured, the prediction log; what went (with ``dry_run``: what
    would go, nothing deleted), and any error."""
    out: dict[str, Any] = {"reports_deleted": [], "prediction_log_deleted": [], "dry_run": dry_run}
    try:
        out["reports_deleted"] = prune_reports(reports_dir, config.watch.keep_reports, dry_run=dry_run)
    except OSError as err:
        out["error"] = redact_text(f"pruning {reports_dir}: {type(err).__name__}: {err}")[:300]
    keep_days = config.serving.prediction_log_retention_days
    if config.serving.prediction_log and keep_days is not None:
        from ctpipe.components.lib.prediction_log import prune_prediction_log

        today = dt.datetime.fromtimestamp(now, dt.UTC).date()
        try:
            out["prediction_log_deleted"] = prune_prediction_log(config.serving.prediction_log, keep_days, today,
                                                                 dry_run=dry_run)
        except Exception as err:  # an unreachable store: the check goes on, the next one tries again
            out["error"] = redact_text(f"pruning the prediction log: {type(err).__name__}: {err}")[:300]
    return out


def prune_reports(reports_dir: Path, keep: int, *, dry_run: bool = False) -> list[str]:
    """Delete all but the newest ``keep`` reports of each kind (by modification time; a report's ``.json`` and
    ``.html`` go together); return the deleted file names (with ``dry_run``: those that would go)."""
    if not reports_dir.is_dir():
        return []
    deleted = []
    for kind in REPORT_KINDS:
        reports: dict[str, list[Path]] = {}
        for path in reports_dir.glob(f"{kind}*"):
            if path.suffix in (".json", ".html") and path.is_file():
                reports.setdefault(path.stem, []).append(path)
        newest_first = sorted(reports.values(), key=lambda files: max(f.stat().st_mtime for f in files), reverse=True)
        for files in newest_first[keep:]:
            for path in sorted(files):
                if not dry_run:
                    path.unlink(missing_ok=True)
                deleted.append(path.name)
    return deleted
