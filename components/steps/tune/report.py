"""The search as a person reads it: one HTML page (the KFP UI shows it; MLflow keeps it on the training run).

What the tuning playbook asks to look at: the trial table (values, objective, status, time), one axis plot per
hyperparameter (the objective against its value, on a log axis where the range is log), the boundary check (the
best value in the outer 10 % of its range says: widen the range, the optimum may lie beyond it), and the
scientific / nuisance / fixed split the search was configured with. Plots are PNGs (matplotlib) inside the page.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ctpipe.components.lib.atomic_files import atomic_write_text
from ctpipe.components.lib.config import Config, SearchDimension
from ctpipe.components.steps.tune.space import position
from ctpipe.components.steps.tune.trials import TrialOutcome

EDGE = 0.1  # the outer share of a range the boundary check warns about


def boundary_warnings(dimensions: dict[str, SearchDimension], best: TrialOutcome | None) -> list[str]:
    """A warning per numeric hyperparameter whose best value lies in the outer ``EDGE`` of its range (or outside)."""
    if best is None:
        return []
    out = []
    for key, dimension in dimensions.items():
        where = position(dimension, best.values.get(key)) if key in best.values else None
        if where is None or EDGE <= where <= 1 - EDGE:
            continue
        side = "lower" if where < EDGE else "upper"
        scale = " (log scale)" if dimension.log else ""
        placement = "outside" if where < 0 or where > 1 else f"in the {side} {EDGE:.0%}{scale} of"
        out.append(f"{key}: the best value {best.values[key]} lies {placement} its range {dimension.text()}; the "
                   f"optimum may lie beyond it: widen the range {'down' if side == 'lower' else 'up'}ward and search again")
    return out


def axis_plot(key: str, dimension: SearchDimension, outcomes: Sequence[TrialOutcome], metric: str,
              chosen: TrialOutcome | None) -> str:
    """The objective against ``key``'s value for every trial with an objective, as a PNG data URI."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2, 3.0), dpi=90)
    ax = fig.add_subplot()
    scored = [o for o in outcomes if o.objective is not None and key in o.values]
    if dimension.kind == "choice":
        labels = [str(v) for v in dimension.values]
        xs = [labels.index(str(o.values[key])) if str(o.values[key]) in labels else -1 for o in scored]
        ax.set_xticks(range(len(labels)), labels)
    else:
        xs = [o.values[key] for o in scored]
    ax.scatter(xs, [o.objective for o in scored], color="#1f77b4", s=22, label="trial")
    if dimension.kind != "choice":
        for bound in (dimension.low, dimension.high):  # the range's ends: the boundary check's reference
            ax.axvline(float(bound), color="#bbbbbb", linewidth=0.8)  # type: ignore[arg-type]
        if dimension.log:
            ax.set_xscale("log")
    for x, o in zip(xs, scored, strict=True):
        if chosen is not None and o.index == chosen.index:
            ax.scatter([x], [o.objective], color="#d62728", s=70, marker="*", label="chosen", zorder=3)
        elif o.baseline:
            ax.scatter([x], [o.objective], facecolors="none", edgecolors="#2ca02c", s=70, label="configured", zorder=3)
    ax.set_xlabel(key + (" (log)" if dimension.log else ""))
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} against {key}", fontsize=9)
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def best_per_value(key: str, outcomes: Sequence[TrialOutcome], direction: str) -> list[tuple[str, float, int]]:
    """For a scientific hyperparameter: the best objective (over the nuisance ones) at each value it was tried at."""
    best: dict[str, TrialOutcome] = {}
    for o in outcomes:
        if o.objective is None or key not in o.values:
            continue
        label = str(o.values[key])
        if label not in best or _better(o.objective, best[label].objective, direction):  # type: ignore[arg-type]
            best[label] = o
    return [(label, o.objective, o.index) for label, o in sorted(best.items())]  # type: ignore[misc]


def _better(a: float, b: float, direction: str) -> bool:
    return a > b if direction == "max" else a < b


def render_report(path: str | Path, config: Config, outcomes: Sequence[TrialOutcome], chosen: TrialOutcome | None,
                  warnings: Sequence[str], *, metric: str, direction: str, seconds: float) -> None:
    """Write the search's HTML page to ``path``."""
    tune = config.tune
    dims = tune.dimensions()
    e = html.escape
    counts = {s: sum(o.status == s for o in outcomes) for s in ("succeeded", "diverged", "gate_failed", "failed", "stopped",
                                                         "not_started")}
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>ctpipe hyperparameter search</title><style>",
        "body{font-family:sans-serif;margin:1.5em;max-width:70em} table{border-collapse:collapse;font-size:0.85em}"
        " td,th{border:1px solid #ccc;padding:0.2em 0.5em;text-align:right} th{background:#f3f3f3}"
        " .warn{background:#fff3cd;padding:0.5em;border:1px solid #e0c060} tr.chosen{background:#e8f4e8}"
        " td.text{text-align:left} img{margin:0.3em}",
        "</style></head><body><h1>Hyperparameter search</h1>",
        f"<p>Objective: <b>{e(metric)}</b> on the validation split ({'higher' if direction == 'max' else 'lower'} is "
        f"better); the test split is not read. Sampler: <b>{e(tune.sampler)}</b> (seed {tune.seed}); "
        f"{len(outcomes)} trials: {', '.join(f'{n} {s}' for s, n in counts.items() if n)}; {seconds:.0f} s. "
        f"Each trial: {_budget_text(config)}. Every trial's values went through the sanity gate's checks before it "
        "trained; a trial the gate refused (gate_failed) was not trained and cannot be chosen.</p>",
    ]
    if chosen is not None:
        values = ", ".join(f"{e(k)} = <b>{e(str(v))}</b>" for k, v in chosen.values.items()) or "the configured values"
        parts.append(f"<p>Chosen: trial {chosen.index} ({values}), {e(metric)} = {chosen.objective:.6g}, sanity gate "
                     f"{e(str(chosen.gate))}. The candidate "
                     "trains with these values and goes through selection, evaluation and the blessing unchanged.</p>")
    else:
        parts.append("<p class='warn'>No trial succeeded: nothing was chosen.</p>")
    if warnings:
        parts.append("<div class='warn'><b>Boundary check</b><ul>" + "".join(f"<li>{e(w)}</li>" for w in warnings) + "</ul></div>")
    parts.append("<h2>Scientific, nuisance and fixed hyperparameters</h2><table><tr><th>key</th><th>role</th><th>range or value</th></tr>")
    for key, dimension in dims.items():
        parts.append(f"<tr><td class='text'>{e(key)}</td><td class='text'>{tune.role_of(key)}</td>"
                     f"<td class='text'>{e(dimension.text())}</td></tr>")
    flat = _flat(config.to_dict())
    for key in tune.fixed:
        parts.append(f"<tr><td class='text'>{e(key)}</td><td class='text'>fixed</td><td class='text'>{e(str(flat.get(key, '(task default)')))}</td></tr>")
    parts.append("</table>")
    parts.append("<h2>Axis plots</h2><div>" + "".join(
        f"<img alt='{e(metric)} against {e(key)}' src='{axis_plot(key, d, outcomes, metric, chosen)}'>" for key, d in dims.items())
        + "</div>")
    for key in tune.scientific:
        rows = "".join(f"<tr><td class='text'>{e(v)}</td><td>{obj:.6g}</td><td>{i}</td></tr>"
                       for v, obj, i in best_per_value(key, outcomes, direction))
        parts.append(f"<h3>{e(key)} (scientific): the best {e(metric)} at each value, over the nuisance hyperparameters</h3>"
                     f"<table><tr><th>value</th><th>best {e(metric)}</th><th>trial</th></tr>{rows}</table>")
    keys = list(dims)
    header = "".join(f"<th>{e(k)}</th>" for k in keys)
    parts.append(f"<h2>Trials</h2><table><tr><th>trial</th>{header}<th>{e(metric)}</th><th>status</th><th>sanity gate</th><th>best step</th>"
                 "<th>seconds</th><th>note</th></tr>")
    for o in outcomes:
        cells = "".join(f"<td>{e(str(o.values[k])) if k in o.values else '(default)'}</td>" for k in keys)
        objective = f"{o.objective:.6g}" if o.objective is not None else ""
        note = ("configured values; " if o.baseline else "") + (o.error or "")
        css = " class='chosen'" if chosen is not None and o.index == chosen.index else ""
        parts.append(f"<tr{css}><td>{o.index}</td>{cells}<td>{objective}</td><td class='text'>{o.status}</td><td class='text'>{o.gate or ''}</td>"
                     f"<td>{'' if o.best_step is None else o.best_step}</td><td>{o.seconds:.1f}</td>"
                     f"<td class='text'>{e(note[:300])}</td></tr>")
    parts.append("</table></body></html>")
    atomic_write_text(path, "\n".join(parts))


def _budget_text(config: Config) -> str:
    tune, train = config.tune, config.train
    return (f"{tune.trial_steps or train.max_steps} steps"
            + ("" if tune.trial_steps else " (the full budget)")
            + f", at most {tune.trial_seconds or train.deadline_seconds} s, {train.workers} ranks"
            + (f"; {tune.parallel_trials} at once" if tune.parallel_trials > 1 else ""))


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out

