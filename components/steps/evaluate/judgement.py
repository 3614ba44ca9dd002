"""Judge a candidate on one test split: paired evidence against the champion and the prior, overall and per slice.

The rules themselves (value floors, change bounds, Bonferroni-corrected slice levels) are in
``blessing.py``; this applies them to a candidate's, the champion's and the prior predictor's
probabilities on the same rows (``evaluate.evaluate_candidate`` scores the models).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.errors import UserError
from ctpipe.components.lib.metrics import prior_probabilities
from ctpipe.components.steps.evaluate.blessing import (
    CLASSIFICATION,
    Check,
    Evidence,
    Scorer,
    collect_evidence,
    floor_check,
    higher_is_better,
    interval_checks,
    judge,
    linear_check,
    slice_rules,
)

MISSING_SLICE = "<missing>"


@dataclass
class Judgement:
    """The blessing rules applied to a candidate's evidence on one test split."""

    passed: bool  # rules exist, at least one applied, and every check passed
    applied: bool
    checks: list[Check]
    evidence: dict[str, Evidence]
    slices: list[dict[str, Any]]
    # Metric -> higher is better, as the rules judged it (the decision sentence reads its intervals so).
    higher_is_better: dict[str, bool] = field(default_factory=dict)


def judge_candidate(
    y: np.ndarray,
    p_candidate: np.ndarray,
    p_champion: np.ndarray | None,
    config: Config,
    frame: pd.DataFrame,
    numeric_columns: list[str],
    *,
    scorer: Scorer | None = None,
    baseline: np.ndarray | None = None,
    linear: np.ndarray | None = None,
    linear_name: str = "the linear baseline",
) -> Judgement:
    """Paired evidence of candidate vs champion vs the trivial predictor (and the linear baseline), judged by
    ``config.evaluate``.

    ``scorer`` computes and resamples the metrics (the task; by default class-probability metrics) and
    ``baseline`` holds the trivial predictor's predictions (by default the class prior); with a scorer
    and no baseline, "baseline" value rules have nothing to compare with and fail. ``linear``: the linear
    baseline's predictions (``linear_baseline.py``), which a first model must not lose to clearly on a metric with
    a value rule (``evaluate.beat_linear``)."""
    ev = config.evaluate
    scorer = scorer or CLASSIFICATION
    if baseline is None and scorer is CLASSIFICATION:
        baseline = prior_probabilities(y, p_candidate.shape[1])
    evidence = collect_evidence(
        y, p_candidate, p_champion, baseline, samples=ev.bootstrap_samples, seed=ev.seed, confidence=ev.confidence,
        scorer=scorer, p_linear=linear,
    )
    directions = metric_directions_of(scorer)
    checks = judge(ev.thresholds, evidence, directions=directions, baseline_name=baseline_name_of(scorer))
    if ev.beat_linear and p_champion is None and checks:
        for metric, rule in ev.thresholds.items():
            found = (linear_check(metric, rule, evidence[metric], margin=ev.linear_margin, linear_name=linear_name,
                                  directions=directions) if rule.value is not None and metric in evidence else None)
            checks += [found] if found else []
    checks += [floor_check(metric, floor, evidence, directions=directions) for metric, floor in ev.floors.items()]
    slices, slice_checks = evaluate_slices(frame, y, p_candidate, p_champion, config, numeric_columns,
                                           scorer=scorer, baseline=baseline)
    # A first model under change-only rules meets no rule at all: that is not a blessing either.
    applied = bool(checks)
    passed = bool(ev.thresholds) and applied and all(c.passed for c in checks + slice_checks)
    judged = {m: higher_is_better(m, rule, directions) for m, rule in ev.thresholds.items() if m in evidence}
    return Judgement(passed, applied, checks + slice_checks, evidence, slices, judged)


def slice_labels(frame: pd.DataFrame, column: str, numeric: bool) -> pd.Series:
    """Each row's slice value: the category, or the quartile bin of a numeric column."""
    if column not in frame.columns:
        raise UserError(
            f"evaluate.slices names column '{column}', which is not in the test split; columns are: "
            f"{', '.join(map(str, frame.columns))}. Fix evaluate.slices."
        )
    series = frame[column]
    if numeric:
        values = pd.to_numeric(series, errors="coerce")
        try:
            binned = pd.qcut(values, 4, duplicates="drop")
        except ValueError:  # all values missing or constant
            binned = pd.Series(pd.NA, index=series.index)
        return binned.astype(str).where(values.notna(), MISSING_SLICE)
    return series.astype(str).where(series.notna(), MISSING_SLICE)


def evaluate_slices(
    frame: pd.DataFrame,
    y: np.ndarray,
    candidate: np.ndarray,
    champion: np.ndarray | None,
    config: Config,
    numeric_columns: list[str],
    *,
    scorer: Scorer | None = None,
    baseline: np.ndarray | None = None,
) -> tuple[list[dict[str, Any]], list[Check]]:
    """Per-slice metrics for every configured column, and the slice checks, each on its own paired interval.

    Only slices with at least ``evaluate.slice_min_rows`` rows are judged. Every interval-judged slice
    check is one test of a family of m; each uses a two-sided level of 1 − alpha/m (Bonferroni), so an
    equal candidate is blocked by some slice with probability at most alpha/2 (one-sided tests).
    """
    ev = config.evaluate
    rules = slice_rules(ev.thresholds, ev.slice_thresholds)
    scorer = scorer or CLASSIFICATION
    if baseline is None and scorer is CLASSIFICATION:
        baseline = prior_probabilities(y, candidate.shape[1])  # the same constant predictor as overall
    groups = []
    for column in ev.slices:
        labels = slice_labels(frame, column, column in numeric_columns).to_numpy()
        for value in sorted(set(labels)):
            mask = labels == value
            groups.append((column, value, mask, int(mask.sum()) >= ev.slice_min_rows))
    family = sum(interval_checks(rule, champion is not None) for *_, judged in groups if judged for rule in rules.values())
    level = 1 - (1 - ev.confidence) / max(family, 1)
    rows, checks = [], []
    for i, (column, value, mask, judged) in enumerate(groups):
        name = f"{column}={value}"
        cand = scorer.compute_metrics(y[mask], candidate[mask])
        champ = scorer.compute_metrics(y[mask], champion[mask]) if champion is not None else None
        slice_checks: list[Check] = []
        evidence: dict[str, Evidence] = {}
        undefined: list[str] = []
        if judged and rules:
            evidence = collect_evidence(
                y[mask], candidate[mask], champion[mask] if champion is not None else None,
                baseline[mask] if baseline is not None else None,
                samples=ev.bootstrap_samples, seed=ev.seed + 1 + i, confidence=level, normal=True, scorer=scorer,
            )
            # A metric these rows cannot define (ROC AUC of a one-class slice) is NaN for every model alike:
            # reported, not read as a regression. A candidate alone with NaN is still judged (and fails).
            undefined = sorted(m for m in rules if m in evidence and _undefined_for_all(evidence[m]))
            judged_evidence = {m: e for m, e in evidence.items() if m not in undefined}
            slice_checks = judge(rules, judged_evidence, where=name, directions=metric_directions_of(scorer),
                                 baseline_name=baseline_name_of(scorer))
        checks.extend(slice_checks)
        rows.append(
            {
                "slice": name,
                "column": column,
                "value": value,
                "rows": int(mask.sum()),
                "judged": judged,
                "candidate": cand,
                "champion": champ,
                "confidence": level if judged else None,
                "differences": {m: e.vs_champion.to_dict() for m, e in evidence.items() if e.vs_champion},
                "undefined": undefined,
                "blocking": any(not c.passed for c in slice_checks),
                "failed": [c.message for c in slice_checks if not c.passed],
            }
        )
    return rows, checks


def _undefined_for_all(evidence: Evidence) -> bool:
    """The metric is NaN for the candidate and for every reference it is compared with on these rows."""
    values = [evidence.candidate.value, evidence.champion, evidence.baseline]
    return all(v is None or not np.isfinite(v) for v in values)


def baseline_name_of(scorer: Scorer) -> str:
    """What the scorer's input-blind baseline is, in words (a task's ``baseline_name``; the prior predictor)."""
    return getattr(scorer, "baseline_name", None) or "the prior predictor"


def metric_directions_of(scorer: Scorer) -> dict[str, bool] | None:
    """Metric -> higher is better, from a task scorer's ``metrics`` (None for the built-in classifier)."""
    metrics = getattr(scorer, "metrics", None)
    return {m.name: m.higher_is_better for m in metrics} if metrics else None
