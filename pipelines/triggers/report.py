"""The trigger reports as JSON and as self-contained HTML pages of one kind (``report_page``: what was compared,
on which rows, the decision, then the detail): the drift report with an inline SVG figure per column, the decay
report (``decay.py``) with every row counted and each cohort's interval; logged to MLflow beside their JSON."""

from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path
from typing import Any

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


PAGE_STYLE = """<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left}
.bad{color:#b00}.ok{color:#070}.muted{color:#888}.fig{display:inline-block;margin:1em;vertical-align:top}
.key span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px}</style>"""


def report_page(title: str, *, compared: str, rows: str, decision: str, bad: bool, body: str) -> str:
    """A trigger's report page (the drift report's, the decay report's): what was compared, on which rows, the
    decision (with its interval or thresholds), then the detail. HTML fragments in; one self-contained page out
    (inline CSS, no scripts or external assets: it opens from disk, in MLflow's and in the KFP UI's frames)."""
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
{PAGE_STYLE}</head><body>
<h1>{html.escape(title)}</h1>
<p class="muted">Generated {dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}.</p>
<h2>What was compared</h2>
{compared}
<h2>On which rows</h2>
{rows}
<h2>Decision</h2>
<p class="{"bad" if bad else "ok"}">{decision}</p>
{body}
</body></html>
"""


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
    decision = (
        f"Drift: {len(drifted)} column(s) passed their thresholds: {html.escape(', '.join(drifted))}."
        if report.drifted
        else f"No drift ({len(drifted)} drifted column(s), {report.min_drifted_columns} needed)."
    )
    window = html.escape(", ".join(report.window)) or "(all)"
    champion = " version " + html.escape(str(report.champion_version)) if report.champion_version else ""
    return report_page(
        title,
        compared=f"<p>The distribution of each column of the current window against the champion{champion}'s "
        f"reference statistics ({report.reference_rows} train rows), each column by its tests and thresholds.</p>",
        rows=f"<p>Current window: {window} ({report.rows} rows).</p>",
        decision=decision,
        bad=report.drifted,
        body=f"""<table><tr><th>column</th><th>kind</th><th>verdict</th><th>deciding test</th><th>all tests</th><th>null fraction</th></tr>
{"".join(rows)}</table>
<p class="key">Figures: fraction of rows per reference decile (numeric) or category:
<span style="background:{_REF_COLOR}"></span>reference <span style="background:{_CUR_COLOR}"></span>current</p>
{"".join(figures)}""",
    )


def write_drift_report(report: DriftReport, json_path: str | Path, html_path: str | Path) -> tuple[Path, Path]:
    """Write the report's JSON and HTML atomically; return both paths."""
    json_path, html_path = Path(json_path), Path(html_path)
    atomic_write_text(json_path, json.dumps(report.to_dict(), indent=1, allow_nan=False))
    atomic_write_text(html_path, render_html(report))
    return json_path, html_path


def write_decay_report(report: dict[str, Any], json_path: str | Path, html_path: str | Path) -> tuple[Path, Path]:
    """Write the decay report's JSON and its page (``render_decay_html``) atomically; return both paths."""
    json_path, html_path = Path(json_path), Path(html_path)
    atomic_write_text(json_path, json.dumps(report, indent=1, default=str))
    atomic_write_text(html_path, render_decay_html(report))
    return json_path, html_path


def render_decay_html(report: dict[str, Any], *, title: str = "ctpipe decay report") -> str:
    """The decay check's page (``decay.DecayReport`` as a dict, with ``labels_uri``, ``prediction_log`` and the
    ``decay`` settings when known): the comparison, every row counted (judged or why not), each cohort's interval."""
    metric, version = html.escape(str(report.get("metric") or "accuracy")), html.escape(str(report["version"]))
    reference, threshold = report.get("reference"), report.get("threshold")
    settings = report.get("decay") or {}
    cohorts = report.get("cohorts") or []
    confidence = f"{settings['confidence']:.0%} " if settings.get("confidence") else ""
    where = (f" (prediction log <code>{html.escape(str(report['prediction_log']))}</code>, labels "
             f"<code>{html.escape(str(report['labels_uri']))}</code>)" if report.get("prediction_log") else "")
    higher = report.get("higher_is_better", True)
    allowance = ("minus <code>watch.decay.max_drop</code>" if higher
                 else "times 1 + <code>watch.decay.max_rise</code> (lower is better)")
    against = (f"against its registered test {metric} {reference:.3f} {allowance}: a cohort has decayed when its whole "
               f"{confidence}bootstrap interval lies {'below' if higher else 'above'} {threshold:.3f}"
               if reference is not None and threshold is not None
               else f"against nothing: the version has no registered test {metric}, so no cohort is judged")
    window = (f" Cohorts served within the last {settings['lookback_days']} days; one is judged once "
              f"{settings['label_delay_days']} days have passed (its labels are complete)"
              + (f" and with at least {settings['min_rows']} rows joined." if "min_rows" in settings else ".")
              if "lookback_days" in settings else "")
    others = report.get("other_versions") or {}
    counts = [
        (f"predictions of version {version} in the window",
         sum(c["predictions"] for c in cohorts) + int(report.get("without_key") or 0)),
        ("joined with a label", sum(c["joined"] for c in cohorts)),
        ("without a label yet", sum(c["unlabeled"] for c in cohorts)),
        ("without a key", int(report.get("without_key") or 0)),
        ("labels without a prediction", int(report.get("labels_without_prediction") or 0)),
        ("predictions of other versions (not judged)", f"{sum(others.values())}" + (
            " (" + ", ".join(f"version {html.escape(str(v))}: {n}" for v, n in sorted(others.items())) + ")"
            if others else "")),
    ]
    lines = []
    for c in cohorts:
        judged = c.get("low") is not None
        verdict = ('<b class="bad">decayed</b>' if c.get("decayed") else '<span class="ok">ok</span>') if judged \
            else f'<span class="muted">{html.escape(c.get("note") or "not judged")}</span>'
        estimate = f"{c['value']:.3f}" if judged else ""
        interval = f"[{c['low']:.3f}, {c['high']:.3f}]" if judged else ""
        lines.append(
            f"<tr><td>{html.escape(c['day'])}</td><td>{'closed' if c['closed'] else 'open'}</td><td>{c['predictions']}</td>"
            f"<td>{c['joined']}</td><td>{c['unlabeled']}</td><td>{estimate}</td><td>{interval}</td><td>{verdict}</td></tr>"
        )
    return report_page(
        title,
        compared=(f"<p>The {metric} of model version {version} on the documents it served, as they arrived later and "
                  f"joined by key, scored again by that version{where}" if report.get("scored_documents") else
                  f"<p>The {metric} of model version {version} on the predictions it served, joined by key with the "
                  f"labels that arrived later{where}")
        + f", per cohort (the predictions of one day), {against}.{window}</p>",
        rows="<table>" + "".join(f"<tr><th>{label}</th><td>{value}</td></tr>" for label, value in counts) + "</table>",
        decision=html.escape(str(report.get("reason") or "")),
        bad=bool(report.get("decayed")),
        body=f"""<h2>Cohorts</h2>
<table><tr><th>served on</th><th>cohort</th><th>predictions</th><th>joined</th><th>without a label yet</th><th>{metric}</th><th>{confidence}interval</th><th>verdict</th></tr>
{"".join(lines)}</table>
{cohort_svg(cohorts, reference, threshold, metric=metric, fraction=higher)}""",
    )


def cohort_svg(cohorts: list[dict[str, Any]], reference: float | None, threshold: float | None, *,
               metric: str = "accuracy", fraction: bool = True) -> str:
    """Each judged cohort's interval (a bar) and point estimate (a dot) beside the reference and the threshold;
    ``fraction``: the metric lies in [0, 1] (accuracy), else the axis follows the values (an RMSE)."""
    judged = [c for c in cohorts if c.get("low") is not None]
    if not judged:
        return '<p class="muted">no figure: no cohort judged yet</p>'
    marks = [v for c in judged for v in (c["low"], c["high"])] + [v for v in (reference, threshold) if v is not None]
    pad = 0.05 if fraction else 0.05 * max(max(marks) - min(marks), abs(max(marks)), 1e-9)
    bottom, top = min(marks) - pad, max(marks) + pad
    if fraction:
        bottom, top = max(0.0, bottom), min(1.0, top)
    step, width = 26, max(160, 60 + 26 * len(judged))

    def y(value: float) -> float:
        return 10 + _H * (top - value) / max(top - bottom, 1e-9)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{_H + 80}" role="img" '
             'aria-label="cohort intervals against the threshold">',
             f'<text x="0" y="{y(top) + 4:.1f}" font-size="10">{top:.2f}</text>',
             f'<text x="0" y="{y(bottom) + 4:.1f}" font-size="10">{bottom:.2f}</text>']
    for value, color, dash, name in ((reference, _REF_COLOR, "", f"test {metric}"),
                                     (threshold, "#b00", ' stroke-dasharray="4 3"', "threshold")):
        if value is not None:
            parts.append(f'<line x1="35" y1="{y(value):.1f}" x2="{width}" y2="{y(value):.1f}" stroke="{color}"{dash}>'
                         f"<title>{name} {value:.3f}</title></line>")
    for i, c in enumerate(judged):
        x, color = 48 + i * step, "#b00" if c.get("decayed") else _CUR_COLOR
        parts.append(
            f'<line x1="{x}" y1="{y(c["high"]):.1f}" x2="{x}" y2="{y(c["low"]):.1f}" stroke="{color}" stroke-width="3"/>'
            f'<circle cx="{x}" cy="{y(c["value"]):.1f}" r="3" fill="{color}"><title>{html.escape(c["day"])}: '
            f'{c["value"]:.3f} [{c["low"]:.3f}, {c["high"]:.3f}], {c["joined"]} rows</title></circle>'
            f'<text x="{x}" y="{_H + 24}" font-size="9" text-anchor="end" transform="rotate(-40 {x} {_H + 24})">'
            f'{html.escape(c["day"][5:])}</text>'
        )
    parts.append("</svg>")
    return ('<p class="key">Figure: each closed cohort\'s interval and estimate; <span style="background:'
            f'{_REF_COLOR}"></span>test {html.escape(metric)} <span style="background:#b00"></span>threshold</p>'
            + "".join(parts))


def log_drift_report(tracking_uri: str, mlflow_run_id: str, report_json: str | Path) -> None:
    """Log the report's JSON and its HTML beside it (when there is one) on an MLflow run, retried: under ``drift/``,
    or ``decay/`` for a decay report (``decay-<version>-<day>.json``)."""
    json_path = Path(report_json)
    folder = "decay" if json_path.name.startswith("decay-") else "drift"
    files = {f"{folder}/{path.name}": path for path in (json_path, json_path.with_suffix(".html")) if path.exists()}
    log_step(tracking_uri, mlflow_run_id, "drift report", files=files)


def log_report_before_run(tracking_uri: str, experiment: str, run_name: str, report_json: str | Path,
                          trigger: str = "drift") -> tuple[str, str, str]:
    """Record the report that is about to start the KFP run named ``run_name`` as its own MLflow run (found again by
    that name, so a retried start logs it once), before the run exists: its page can then go with the run's
    parameters, for its first step to show in the KFP UI. Returns (MLflow run id, the page's ``runs:/`` URI, the
    page's SHA-256 as read before it was logged); the URI and digest are empty without a page. Tag the MLflow run
    ``ctpipe.drift_report_for`` with the KFP run's id once it exists (``link_report_to_run``)."""
    import hashlib

    page = Path(report_json).with_suffix(".html")
    # Hashed before it is logged: a page rewritten in between is then refused by the step, never shown unchecked.
    digest = hashlib.sha256(page.read_bytes()).hexdigest() if page.exists() else ""
    run_id, _ = find_or_create_run(
        tracking_uri, ensure_experiment(tracking_uri, experiment), key_tag="ctpipe.drift_report_for_run_name",
        key=run_name, run_name=f"drift-report-{run_name}", tags={"ctpipe.trigger": trigger},
    )  # fmt: skip
    log_drift_report(tracking_uri, run_id, report_json)
    end_run(tracking_uri, run_id)
    folder = "decay" if page.name.startswith("decay-") else "drift"
    return run_id, (f"runs:/{run_id}/{folder}/{page.name}" if digest else ""), digest


def link_report_to_run(tracking_uri: str, report_run_id: str, pipeline_run_id: str) -> None:
    """Tag the report's MLflow run with the KFP run it started (``ctpipe.drift_report_for``)."""
    from ctpipe.components.lib.tracking.training_runs import set_run_tag

    set_run_tag(tracking_uri, report_run_id, "ctpipe.drift_report_for", pipeline_run_id)


def page_parameters(report_json: str | Path) -> dict[str, str]:
    """The pipeline parameters that show a local run's report page in its first step's output (``ctpipe submit
    --drift-report``): the page's path and SHA-256; none without a page."""
    import hashlib

    page = Path(report_json).with_suffix(".html")
    if not page.exists():
        return {}
    return {"trigger_report_uri": str(page.resolve()), "trigger_report_sha256": hashlib.sha256(page.read_bytes()).hexdigest()}
