"""The blessing rules in TFX's terms, judged on paired intervals instead of point estimates.

For each metric the evidence is the candidate's value and two PAIRED differences on the same test
rows (the same bootstrap resamples): candidate − champion and candidate − the prior predictor (the
class frequencies of this test split, whose argmax is the majority class). Differences are read as an
*improvement* in the metric's better direction; with ``alpha = 1 - evaluate.confidence``:

- value "baseline" (the default first-model floor): passes only when the improvement over the prior
  predictor has its whole interval above zero, i.e. the candidate beats the trivial baseline with
  evidence (one-sided test at level alpha/2).
- value as a number: an absolute floor (a ceiling for lower-is-better metrics) on the point estimate,
  as the user set it; its interval is reported beside it.
- change_abs / change_rel (vs the champion): blocks only when the interval shows the improvement is
  below the allowed change, i.e. its upper bound is below ``change_abs`` (or ``change_rel`` × the
  champion's value). With the default 0 an equal candidate is blocked with probability at most
  alpha/2 per metric, and one whose interval lies wholly below zero is blocked.

Slices (see ``judgement.evaluate_slices``) use the same rules on their own paired intervals at a
Bonferroni-corrected level.

Beside the trivial baseline, a strong one: a linear model on the candidate's encoded features, fitted on train
(``linear_baseline.py``). A first model (no champion) is not blessed when, on a metric with a value rule, the
paired interval of its improvement over the linear model lies wholly below ``-evaluate.linear_margin`` x the
linear model's value (``evaluate.beat_linear``, ``linear_check``): it learned clearly less than the obvious
baseline. ``evaluate.floors`` are absolute bounds a user sets (``floor_check``), on every candidate.

A paired difference of a metric that the task gives as a ratio of per-unit sums (``unit_sums``: a causal LM's
NLL over its documents' tokens or bytes) is judged by flipping the units' signs instead of resampling them
(``metrics.sign_flip_interval``): an exact level at ~100 documents of unequal lengths.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from ctpipe.components.lib.config import Threshold
from ctpipe.components.lib.config.gate_sections import metric_direction
from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.lib.metrics import (
    ALL_METRICS,
    Interval,
    compute_metrics,
    normal_interval,
    paired_bootstrap,
    percentile_interval,
    sign_flip_interval,
)

# Random sign vectors of the sign-flip interval: its level is k / (flips + 1) over evaluations, and for ONE draw of
# flips within about ±0.1 point of that at 20,000 (±0.3 at 1,000); 20,000 x 100 documents take a few milliseconds.
SIGN_FLIPS = 20_000


def sign_flips(samples: int) -> int:
    """How many sign vectors the blessing draws: ``evaluate.bootstrap_samples``, and at least ``SIGN_FLIPS``."""
    return max(samples, SIGN_FLIPS)


def flip_seed(seed: int, candidate: np.ndarray, reference: np.ndarray) -> list[int]:
    """The sign flips' seed: ``evaluate.seed`` and a digest of the two models' predictions, so the same evaluation
    always gets the same verdict while different evaluations get independent flips (the level holds over
    evaluations, not only for one lucky or unlucky draw), and every metric of a pair the same flips (a LM's loss
    and bits per byte then block together, not each on its own draw)."""
    digest = hashlib.blake2b(np.ascontiguousarray(candidate, dtype=np.float64).tobytes(), digest_size=8)
    digest.update(np.ascontiguousarray(reference, dtype=np.float64).tobytes())
    return [int(seed), int.from_bytes(digest.digest(), "little")]


class Scorer(Protocol):
    """What the blessing needs from a task (its ``scoring`` part, ``tasks.spec.Scoring``): its metrics, and the
    same metrics on paired resamples of the rows."""

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]: ...

    def bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                  seed: int) -> dict[str, dict[str, np.ndarray]]: ...


class _ClassProbabilities:
    """The default scorer: class-probability metrics (``metrics.py``), for callers that pass no task."""

    compute_metrics = staticmethod(compute_metrics)
    bootstrap = staticmethod(paired_bootstrap)


CLASSIFICATION: Scorer = _ClassProbabilities()


@dataclass
class Check:
    """One rule applied to one metric (optionally on one slice)."""

    metric: str
    kind: str  # value | value_baseline | change_abs | change_rel
    passed: bool
    message: str
    slice: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Evidence:
    """One metric's figures on one set of test rows; differences are candidate − reference, paired."""

    candidate: Interval
    champion: float | None = None
    vs_champion: Interval | None = None
    baseline: float | None = None
    vs_baseline: Interval | None = None
    linear: float | None = None  # the linear baseline's value (``linear_baseline.py``) and candidate − it
    vs_linear: Interval | None = None


def higher_is_better(metric: str, rule: Threshold, directions: dict[str, bool] | None = None) -> bool:
    """The rule's direction; ``auto`` resolves from the task's metrics (``directions``), then the built-in
    classification metrics (log_loss is lower-is-better), then the metric's name (loss/error words).

    Never a guess: a metric that none of these knows is a configuration error, because judging a
    lower-is-better metric as higher-is-better blesses worse models."""
    if rule.direction != "auto":
        return rule.direction == "higher"
    if directions and metric in directions:
        return directions[metric]
    if metric in ALL_METRICS:
        return ALL_METRICS[metric]
    by_name = metric_direction(metric)
    if by_name is None:
        raise ConfigError(
            f"evaluate.thresholds.{metric}: cannot tell whether higher or lower is better for {metric!r}; "
            f"set evaluate.thresholds.{metric}.direction to 'higher' or 'lower'"
        )
    return by_name == "max"


def _improvement(diff: Interval, higher: bool) -> Interval:
    return diff if higher else diff.flipped()


def _ci(interval: Interval) -> str:
    return f"{interval.confidence * 100:.4g}% CI"


def value_check(
    metric: str, rule: Threshold, evidence: Evidence, *, where: str | None = None,
    directions: dict[str, bool] | None = None, baseline_name: str = "the prior predictor",
) -> Check | None:
    """The floor: an absolute bound on the value, or beating the task's input-blind predictor (``baseline_name``:
    the prior predictor of a classifier, the mean predictor of a regression) with evidence."""
    if rule.value is None:
        return None
    higher = higher_is_better(metric, rule, directions)
    prefix = f"slice {where}: " if where else ""
    value = evidence.candidate.value
    if rule.value == "baseline":
        if evidence.vs_baseline is None or evidence.baseline is None:
            return Check(metric, "value_baseline", False, f"{prefix}{metric}: no interval against {baseline_name}", where)
        gain = _improvement(evidence.vs_baseline, higher)
        ok = math.isfinite(gain.low) and gain.low > 0
        # The input-blind baseline is the task's: the class prior for a classifier, a unigram model for a LM.
        figures = (f"{metric} {value:.4f} vs {baseline_name}'s {evidence.baseline:.4f} (the task's input-blind baseline) on these test rows: "
                   f"gain {gain.value:+.4f}, {_ci(gain)} [{gain.low:+.4f}, {gain.high:+.4f}]")
        verdict = ("beats the trivial baseline with evidence" if ok else
                   "fails value threshold 'baseline': the interval of the gain does not lie above 0")
        return Check(metric, "value_baseline", ok, f"{prefix}{figures}: {verdict}", where)
    bound = float(rule.value)
    ok = math.isfinite(value) and (value >= bound if higher else value <= bound)
    iv = evidence.candidate
    message = (f"{prefix}{metric} {value:.4f} {'meets' if ok else 'fails'} value threshold "
               f"{'>=' if higher else '<='} {bound:.4f} ({_ci(iv)} [{iv.low:.4f}, {iv.high:.4f}])")
    return Check(metric, "value", ok, message, where)


def change_checks(
    metric: str, rule: Threshold, evidence: Evidence, *, where: str | None = None,
    directions: dict[str, bool] | None = None,
) -> list[Check]:
    """Absolute and relative change rules against the champion, judged on the paired interval."""
    if evidence.vs_champion is None or evidence.champion is None:
        return []
    higher = higher_is_better(metric, rule, directions)
    gain = _improvement(evidence.vs_champion, higher)
    prefix = f"slice {where}: " if where else ""
    base = (f"{prefix}{metric} {evidence.candidate.value:.4f} vs champion {evidence.champion:.4f}: improvement "
            f"{gain.value:+.4f}, {_ci(gain)} [{gain.low:+.4f}, {gain.high:+.4f}]")
    allowed: list[tuple[str, float, str]] = []
    if rule.change_abs is not None:
        allowed.append(("change_abs", rule.change_abs, f"allowed change {rule.change_abs:+.4f}"))
    if rule.change_rel is not None:
        limit = rule.change_rel * abs(evidence.champion)
        allowed.append(("change_rel", limit, f"allowed change {rule.change_rel:+.2%} of the champion's value ({limit:+.4f})"))
    checks = []
    for kind, limit, text in allowed:
        ok = math.isfinite(gain.high) and gain.high >= limit
        verdict = (f"no evidence of a change below the {text}" if ok else
                   f"the interval shows it worse than the {text}")
        checks.append(Check(metric, kind, ok, f"{base}: {verdict}", where))
    return checks


def linear_check(
    metric: str, rule: Threshold, evidence: Evidence, *, margin: float, linear_name: str,
    directions: dict[str, bool] | None = None,
) -> Check | None:
    """A first model must not lose clearly to the linear baseline: it is blocked when the paired interval of its
    improvement over the linear model lies wholly below ``-margin`` x the linear model's value (``evaluate.beat_linear``)."""
    if evidence.vs_linear is None or evidence.linear is None:
        return None
    higher = higher_is_better(metric, rule, directions)
    gain = _improvement(evidence.vs_linear, higher)
    allowed = -margin * abs(evidence.linear)
    ok = not (math.isfinite(gain.high) and gain.high < allowed)
    figures = (f"{metric} {evidence.candidate.value:.4f} vs {linear_name}'s {evidence.linear:.4f} (a linear model on the "
               f"same encoded features, fitted on train) on these test rows: improvement {gain.value:+.4f}, {_ci(gain)} "
               f"[{gain.low:+.4f}, {gain.high:+.4f}]")
    verdict = (f"no evidence it is worse than the linear baseline by more than {margin:.0%} of its value" if ok else
               f"loses clearly to the linear baseline (the interval lies below -{margin:.0%} of its value): a first "
               "model should at least match the obvious baseline; check that it reads all its inputs, its loss (class "
               "weights), its capacity and training length (evaluate.beat_linear=false blesses it anyway)")
    return Check(metric, "beat_linear", ok, f"{figures}: {verdict}")


def floor_check(metric: str, floor: float, evidence: Evidence, *, directions: dict[str, bool] | None = None) -> Check:
    """The user's absolute floor (``evaluate.floors``): the worst value a model may have and be blessed (a minimum
    for a higher-is-better metric, a maximum for a lower-is-better one), on the point estimate."""
    if metric not in evidence:
        return Check(metric, "floor", False, f"{metric} was not computed for this model, so its floor cannot be met")
    higher = higher_is_better(metric, Threshold(value=floor), directions)
    value, iv = evidence[metric].candidate.value, evidence[metric].candidate
    ok = math.isfinite(value) and (value >= floor if higher else value <= floor)
    return Check(metric, "floor", ok,
                 f"{metric} {value:.4f} {'meets' if ok else 'fails'} the floor evaluate.floors.{metric} = "
                 f"{'>=' if higher else '<='} {floor:g} ({_ci(iv)} [{iv.low:.4f}, {iv.high:.4f}])")


def judge(
    thresholds: dict[str, Threshold], evidence: dict[str, Evidence], *, where: str | None = None,
    directions: dict[str, bool] | None = None, baseline_name: str = "the prior predictor",
) -> list[Check]:
    """Every check of ``thresholds`` on ``evidence``; a metric without evidence fails (a typo never blesses).

    ``directions`` (metric -> higher is better) are the task's, for rules whose direction is ``auto``."""
    checks: list[Check] = []
    for metric, rule in thresholds.items():
        if metric not in evidence:
            if where is None:
                checks.append(
                    Check(metric, "value", False, f"{metric} was not computed for this model (roc_auc needs two classes)")
                )
            continue
        check = value_check(metric, rule, evidence[metric], where=where, directions=directions,
                            baseline_name=baseline_name)
        if check is not None:
            checks.append(check)
        checks.extend(change_checks(metric, rule, evidence[metric], where=where, directions=directions))
    return checks


def interval_checks(rule: Threshold, has_champion: bool) -> int:
    """How many interval-judged checks ``rule`` makes (the size of a multiple-comparison family)."""
    count = 1 if rule.value == "baseline" else 0
    if has_champion:
        count += (rule.change_abs is not None) + (rule.change_rel is not None)
    return count


def slice_rules(
    thresholds: dict[str, Threshold], slice_thresholds: dict[str, Threshold]
) -> dict[str, Threshold]:
    """Rules applied per slice: the explicit slice rules, else the change parts of the overall rules."""
    if slice_thresholds:
        return slice_thresholds
    rules = {}
    for metric, rule in thresholds.items():
        if rule.change_abs is not None or rule.change_rel is not None:
            rules[metric] = Threshold(
                direction=rule.direction, change_abs=rule.change_abs, change_rel=rule.change_rel
            )
    return rules


def collect_evidence(
    y: np.ndarray,
    p_candidate: np.ndarray,
    p_champion: np.ndarray | None,
    p_baseline: np.ndarray | None,
    *,
    samples: int,
    seed: int,
    confidence: float,
    normal: bool = False,
    scorer: Scorer | None = None,
    p_linear: np.ndarray | None = None,
) -> dict[str, Evidence]:
    """Every metric's evidence from ONE paired bootstrap of candidate, champion and baseline on these rows.

    ``normal`` uses the bootstrap standard error with the normal quantile instead of percentiles (for the
    extreme levels of a multiple-comparison correction). Either is widened for the number of rows resampled
    (``metrics.small_sample_widening``).

    A scorer with ``unit_sums`` (a metric as sum(numerator) / sum(denominator) over units, e.g. a causal LM's
    documents) gets its paired differences judged by the sign-flip interval instead wherever both models share
    the denominators (``metrics.sign_flip_interval``: exact for an equal pair at any number of units, where the
    bootstrap over ~100 documents of unequal lengths blocked an equal candidate more often than alpha/2). The
    candidate's own interval stays the bootstrap's; so do the slices' (``normal``: too few sign flips lie in
    the tails of a Bonferroni level).
    """
    scorer = scorer or CLASSIFICATION
    models = {"candidate": p_candidate}
    if p_baseline is not None:
        models["baseline"] = p_baseline
    if p_champion is not None:
        models["champion"] = p_champion
    if p_linear is not None:
        models["linear"] = p_linear
    points = {name: scorer.compute_metrics(y, p) for name, p in models.items()}
    draws = scorer.bootstrap(y, models, samples=samples, seed=seed)
    interval = normal_interval if normal else percentile_interval
    units = len(y)  # the resampled units (rows; a causal LM's documents): small ones widen the intervals
    empty = np.array([])
    sums_of = getattr(scorer, "unit_sums", None)
    sums = {name: sums_of(y, p) for name, p in models.items()} if sums_of and not normal and units else None

    def paired(metric: str, other: str) -> Interval:
        point = points["candidate"][metric] - points[other][metric]
        if sums and metric in sums["candidate"] and metric in sums[other]:
            (top, bottom), (other_top, other_bottom) = sums["candidate"][metric], sums[other][metric]
            if np.array_equal(bottom, other_bottom):  # the same tokens or bytes: a difference of per-unit sums
                return sign_flip_interval(point, top - other_top, bottom, confidence,
                                          samples=sign_flips(samples), seed=flip_seed(seed, p_candidate, models[other]))
        diff = draws["candidate"].get(metric, empty) - draws[other].get(metric, empty) if draws[other] else empty
        return interval(point, diff, confidence, units)

    evidence = {}
    for metric, value in points["candidate"].items():
        evidence[metric] = Evidence(
            candidate=interval(value, draws["candidate"].get(metric, empty), confidence, units),
            champion=points["champion"][metric] if p_champion is not None else None,
            vs_champion=paired(metric, "champion") if p_champion is not None else None,
            baseline=points["baseline"][metric] if p_baseline is not None else None,
            vs_baseline=paired(metric, "baseline") if p_baseline is not None else None,
            linear=points["linear"][metric] if p_linear is not None else None,
            vs_linear=paired(metric, "linear") if p_linear is not None else None,
        )
    return evidence
