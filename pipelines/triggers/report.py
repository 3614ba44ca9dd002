"""The drift report as JSON and as one self-contained HTML page with an inline SVG figure per column."""

from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.drift.column_drift import ColumnDrift
from ctpipe.components.lib.drift.feature_drift import DriftReport
from ctpipe.components.lib.tracking import end_run, ensure_experiment, find_or_create_run, log_step

_BAR_W, _GAP, _H = 18, 10, 140
_REF_COLOR, _CUR_COLOR = "#4c78a8", "#f58518"


def column_svg(col: ColumnDrift) -> str:
    """Grouped bars of the reference and current fractions per bin (or category) of one column."""
    if not col.bins or not col.reference_fractions:
        return f'<p class="muted">no figure: {html.escape(col.kind)} column without comparable values</p>'
    top = max(max(col.reference_fractions), max(col.current_fractions), 1e-9)
    group = 2 * _BAR_W + _GAP
    width = 40 + group * len(col.bins)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{_H + 70}" role="img" '
        f'aria-label="{html.escape(col.column)}: reference vs current">',
        f'<line x1="30" y1="{_H + 10}" x2="{width}" y2="{_H + 10}" stroke="#999"/>',
        f'<text x="0" y="18" font-size="10">{top:.0%}</text>',
    ]
    for i, label in enumerate(col.bins):
        x = 35 + i * group
        for j, (value, color) in enumerate(((col.reference_fractions[i], _REF_COLOR), (col.current_fractions[i], _CUR_COLOR))):
            h = _H * value / top
            parts.append(
                f'<rect x="{x + j * _BAR_W}" y="{_H + 10 - h:.1f}" width="{_BAR_W - 2}" height="{h:.1f}" fill="{color}">'
                f"<title>{html.escape(label)}: {'reference' if j == 0 else 'current'} {value:.3f}</title></rect>"
            )
        parts.append(
            f'<text x="{x + _BAR_W}" y="{_H + 24}" font-size="9" text-anchor="end" '
            f'transform="rotate(-40 {x + _BAR_W} {_H + 24})">{html.escape(label[:18])}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def render_html(report: DriftReport, *, title: str = "ctpipe drift report") -> str:
    """One HTML page: the verdict, a table of every column's tests, and a figure per column."""
    rows, figures = [], []
    for col in sorted(report.columns.values(), key=lambda c: (not c.drifted, c.column)):
        tests = ", ".join(
            f"{name} {t['value']:.4g} (threshold {t['threshold']:.4g}"
            + (f", p={t['p_value']:.2g}" if t.get("p_value") is not None else "")
            + ")"
            for name, t in col.tests.items()
        )
        verdict = '<b class="bad">drifted</b>' if col.drifted else '<span class="ok">ok</span>'
        rows.append(
            f"<tr><td>{html.escape(col.column)}</td><td>{col.kind}</td><td>{verdict}</td>"
            f"<td>{html.escape(col.statistic)} {col.value:.4g} (threshold {col.threshold:.4g})</td>"
            f"<td>{html.escape(tests)}</td><td>{col.null_fraction:.3f} (ref {col.reference_null_fraction:.3f})</td></tr>"
        )
        figures.append(f'<div class="fig"><h3>{html.escape(col.column)} {verdict}</h3>{column_svg(col)}</div>')
    drifted = report.drifted_columns
    verdict = (
        f'<p class="bad">Drift: {len(drifted)} column(s) passed their thresholds: {html.escape(", ".join(drifted))}.</p>'
        if report.drifted
        else f'<p class="ok">No drift ({len(drifted)} drifted column(s), {report.min_drifted_columns} needed).</p>'
    )
    window = html.escape(", ".join(report.window)) or "(all)"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:4px 8px;font-size:13px}}
.bad{{color:#b00}}.ok{{color:#070}}.muted{{color:#888}}.fig{{display:inline-block;margin:1em;vertical-align:top}}
.key span{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}}</style></head><body>
<h1>{html.escape(title)}</h1>
<p>Generated {dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}. Current window: {window} ({report.rows} rows)
against the champion{" version " + html.escape(str(report.champion_version)) if report.champion_version else ""}'s reference
statistics ({report.reference_rows} train rows).</p>
{verdict}
<table><tr><th>column</th><th>kind</th><th>verdict</th><th>deciding test</th><th>all tests</th><th>null fraction</th></tr>
{"".join(rows)}</table>
<p class="key">Figures: fraction of rows per reference decile (numeric) or category:
<span style="background:{_REF_COLOR}"></span>reference <span style="background:{_CUR_COLOR}"></span>current</p>
{"".join(figures)}
</body></html>
"""


def write_drift_report(report: DriftReport, json_path: str | Path, html_path: str | Path) -> tuple[Path, Path]:
    """Write the report's JSON and HTML atomically; return both paths."""
    json_path, html_path = Path(json_path), Path(html_path)
    atomic_write_text(json_path, json.dumps(report.to_dict(), indent=1, allow_nan=False))
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path


def log_drift_report(tracking_uri: str, mlflow_run_id: str, report_json: str | Path) -> None:
    """Log the report's JSON and its HTML beside it (when there is one) on an MLflow run, retried: under ``drift/``,
    or ``decay/`` for a decay report (``decay-<version>-<day>.json``)."""
    json_path = Path(report_json)
    folder = "decay" if json_path.name.startswith("decay-") else "drift"
    files = {f"{folder}/{path.name}": path for path in (json_path, json_path.with_suffix(".html")) if path.exists()}
    log_step(tracking_uri, mlflow_run_id, "drift report", files=files)


def log_drift_report_for_pipeline_run(tracking_uri: str, experiment: str, pipeline_run_id: str, report_json: str | Path,
                                      trigger: str = "drift") -> str:
    """Record the report that started KFP run ``pipeline_run_id`` as its own MLflow run, linked by tag.

    The pipeline's own MLflow run is created by its first step, later and elsewhere; a separate run tagged
    ``ctpipe.drift_report_for`` keeps the two apart (prepare_run looks its run up by
    ``ctpipe.pipeline_run_id``, which this one does not carry).
    """
    run_id, _ = find_or_create_run(
        tracking_uri,
        ensure_experiment(tracking_uri, experiment),
        key_tag="ctpipe.drift_report_for",
        key=pipeline_run_id,
        run_name=f"drift-report-{pipeline_run_id}",
        tags={"ctpipe.trigger": trigger},
    )
    log_drift_report(tracking_uri, run_id, report_json)
    end_run(tracking_uri, run_id)
    return run_id
