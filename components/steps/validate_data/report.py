"""The validation report as Markdown (short summary) and a self-contained HTML page (Data Docs).

The HTML page has inline CSS and no scripts or external assets, so the KFP UI (which shows an ``HTML``
artifact in a sandboxed frame) and a browser opening the file from disk render it the same way.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Any

from ctpipe.components.lib.atomic_files import write_report
from ctpipe.components.lib.credentials import redact_uri
from ctpipe.components.steps.validate_data.findings import SCHEMA_ANOMALY, Finding, errors, warnings


@dataclass
class ValidationSummary:
    """Everything the report shows: the data, the suite used, the findings and figures."""

    data_uri: str
    fingerprint: str = ""
    files: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    suite_source: str = ""
    schema: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    # Empty when every check saw every row; else which rows the row checks judged (data/scan.py).
    judged_on: str = ""

    @property
    def passed(self) -> bool:
        return not errors(self.findings)


def schema_anomalies(findings: list[Finding]) -> list[Finding]:
    """Failed schema checks (a column new, dropped or of another type than the reference schema says)."""
    return [f for f in findings if f.check == SCHEMA_ANOMALY and not f.passed]


def _anomaly_kind(f: Finding) -> str:
    """The kind in the message's "schema anomaly (KIND)" prefix."""
    return f.message.split("(", 1)[1].split(")", 1)[0] if f.message.startswith("schema anomaly (") else f.check


def _status(f: Finding) -> str:
    if f.not_applicable:
        return "not applicable"
    return "passed" if f.passed else ("FAILED" if f.is_error else "warning")


def _md_cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(s: ValidationSummary) -> str:
    """A short Markdown summary: verdict, what failed (observed vs expected, example rows), what passed."""
    errs, warns = errors(s.findings), warnings(s.findings)
    passed = [f for f in s.findings if f.passed and not f.not_applicable]
    not_applicable = [f for f in s.findings if f.not_applicable]
    verdict = "PASSED" if s.passed else "FAILED"
    lines = [
        f"# Data validation: {verdict}",
        "",
        f"- data: `{redact_uri(s.data_uri)}` ({s.files} files, fingerprint `{s.fingerprint[:16]}`)",
        f"- rows: {', '.join(f'{k} {v}' for k, v in s.rows.items()) or 'n/a'}",
        f"- suite: {s.suite_source or 'n/a'}",
        f"- judged on: {s.judged_on or 'every row'}",
        f"- checks: {len(s.findings)} — {len(passed)} passed, {len(errs)} failed (error), {len(warns)} warnings"
        + (f", {len(not_applicable)} not applicable" if not_applicable else ""),
        "",
    ]
    anomalies = schema_anomalies(s.findings)
    if anomalies:
        lines += ["## Schema anomalies (against the reference schema)", "", "| column | anomaly | severity | observed | expected |",
                  "|---|---|---|---|---|"]
        lines += [f"| {_md_cell(f.column or '')} | {_anomaly_kind(f)} | {f.severity} | {_md_cell(f.observed)} | "
                  f"{_md_cell(f.expected)} |" for f in anomalies]
        lines.append("")
    for title, group in (("Errors (fail the run)", errs), ("Warnings (recorded on the model)", warns)):
        if not group:
            continue
        lines += [f"## {title}", "", "| check | column | observed | expected |", "|---|---|---|---|"]
        for f in group:
            lines.append(f"| {_md_cell(f.message)} | {_md_cell(f.column or '')} | {_md_cell(f.observed)} | {_md_cell(f.expected)} |")
        lines.append("")
        for f in group:
            if f.examples:
                lines += [f"Example rows for *{_md_cell(f.message)[:120]}*:", "", "```json"]
                lines += [json.dumps(e, default=str) for e in f.examples]
                lines += ["```", ""]
    if not_applicable:
        lines += ["## Not applicable", ""] + [f"- `{f.check}`: {_md_cell(f.message)}" for f in not_applicable] + [""]
    lines += ["## Passed", ""]
    by_check: dict[str, int] = {}
    for f in passed:
        by_check[f.check] = by_check.get(f.check, 0) + 1
    lines += [f"- `{check}`: {count} passed" for check, count in by_check.items()] or ["- (none)"]
    lines += ["", "Every check with its figures is in the Data Docs (HTML)."]
    if s.seconds:
        lines += ["", "Timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in s.seconds.items())]
    return "\n".join(lines) + "\n"


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1f2328;max-width:1200px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
table{border-collapse:collapse;width:100%;font-size:13px;margin:8px 0}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} .passed{color:#1a7f37;font-weight:600} .FAILED{color:#cf222e;font-weight:700}
.warning{color:#9a6700;font-weight:600} .badge{display:inline-block;padding:2px 10px;border-radius:12px;color:#fff}
.ok{background:#1a7f37} .bad{background:#cf222e} code,pre{font-family:SFMono-Regular,Consolas,monospace;font-size:12px}
pre{background:#f6f8fa;padding:6px;overflow-x:auto;margin:4px 0} .muted{color:#57606a}
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _examples_table(examples: list[dict[str, Any]]) -> str:
    if not examples:
        return ""
    cols = list(dict.fromkeys(k for e in examples for k in e))
    head = "".join(f"<th>{_e(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{_e(e.get(c, ''))}</td>" for c in cols) + "</tr>" for e in examples)
    return f"<table><tr>{head}</tr>{body}</table>"


def render_html(s: ValidationSummary) -> str:
    """Data Docs: one self-contained page with every check, its figures and example bad rows."""
    errs, warns = errors(s.findings), warnings(s.findings)
    badge = '<span class="badge ok">PASSED</span>' if s.passed else '<span class="badge bad">FAILED</span>'
    order = sorted(s.findings, key=lambda f: (f.passed, not f.is_error, f.source, f.column or ""))
    rows = []
    for f in order:
        rows.append(
            f"<tr><td class=\"{_status(f)}\">{_status(f)}</td><td>{_e(f.severity)}</td><td>{_e(f.source)}</td>"
            f"<td>{_e(f.message)}<br><span class=\"muted\"><code>{_e(f.check)}</code></span></td>"
            f"<td>{_e(f.column or '')}</td><td>{_e(f.observed)}</td><td>{_e(f.expected)}</td>"
            f"<td>{_examples_table(f.examples)}</td></tr>"
        )
    anomaly_rows = "".join(
        f"<tr><td>{_e(f.column or '')}</td><td>{_e(_anomaly_kind(f))}</td><td class=\"{_status(f)}\">{_e(f.severity)}</td>"
        f"<td>{_e(f.observed)}</td><td>{_e(f.expected)}</td></tr>" for f in schema_anomalies(s.findings))
    anomaly_section = (
        "<h2>Schema anomalies (against the reference schema)</h2><table><tr><th>column</th><th>anomaly</th>"
        f"<th>severity</th><th>observed</th><th>expected</th></tr>{anomaly_rows}</table>\n" if anomaly_rows else "")
    schema_rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in s.schema.items())
    part_rows = "".join(f"<tr><td>{_e(p['partition'])}</td><td>{_e(p['rows'])}</td></tr>" for p in s.partitions)
    timing = ", ".join(f"{_e(k)} {v:.2f}s" for k, v in s.seconds.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ctpipe data docs</title><style>{CSS}</style></head>
<body>
<h1>Data validation {badge}</h1>
<p>Data <code>{_e(redact_uri(s.data_uri))}</code> — {s.files} files, fingerprint <code>{_e(s.fingerprint)}</code><br>
Rows: {_e(', '.join(f'{k} {v}' for k, v in s.rows.items()) or 'n/a')}<br>
Suite: {_e(s.suite_source or 'n/a')}<br>
Judged on: {_e(s.judged_on or 'every row')}<br>
Checks: {len(s.findings)} — <span class="passed">{len(s.findings) - len(errs) - len(warns)} passed</span>,
<span class="FAILED">{len(errs)} errors</span>, <span class="warning">{len(warns)} warnings</span></p>
<h2>Checks</h2>
<table><tr><th>status</th><th>severity</th><th>source</th><th>check</th><th>column</th><th>observed</th>
<th>expected</th><th>example rows</th></tr>
{''.join(rows)}
</table>
{anomaly_section}<h2>Schema</h2><table>{schema_rows}</table>
<h2>Partitions</h2><table><tr><th>partition</th><th>rows</th></tr>{part_rows}</table>
<p class="muted">Timings: {timing}. Generated by ctpipe validate_data (Great Expectations suite + ctpipe checks).</p>
</body></html>
"""


def write_reports(s: ValidationSummary, *, data_docs_path: str, report_path: str) -> tuple[str, str]:
    """Write the Data Docs page and the Markdown report; return the paths to show a person, each with its
    extension ('' for a report not asked for)."""
    return tuple(write_report(path, text, suffix) if path else ""  # type: ignore[return-value]
                 for path, text, suffix in ((data_docs_path, render_html(s), ".html"),
                                            (report_path, render_markdown(s), ".md")))
