"""The blessing rules in TFX's terms: value thresholds, and change thresholds against the champion.

A rule passes or fails on the point estimates; the paired bootstrap interval of the difference is
attached to every change check so a report can say whether a "regression" is within noise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from components.config import Threshold
from components.evaluation.metrics import ALL_METRICS, Interval


@dataclass
class Check:
    """One rule applied to one metric (optionally on one slice)."""

    metric: str
    kind: str  # value | change_abs | change_rel
    passed: bool
    message: str
    slice: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def higher_is_better(metric: str, rule: Threshold) -> bool:
    """The rule's direction, resolving ``auto`` from the metric (log_loss is lower-is-better)."""
    if rule.direction == "auto":
        return ALL_METRICS.get(metric, True)
    return rule.direction == "higher"


def _fmt(x: float) -> str:
    return f"{x:.4f}"


def _noise_note(diff: Interval | None, confidence: float) -> str:
    if diff is None:
        return ""
    verdict = "within noise" if diff.contains_zero() else "beyond noise"
    return f" ({confidence:.0%} CI of the difference [{diff.low:+.4f}, {diff.high:+.4f}]: {verdict})"


def value_check(metric: str, rule: Threshold, value: float, *, where: str | None = None) -> Check | None:
    """The absolute floor (higher is better) or ceiling (lower is better)."""
    if rule.value is None:
        return None
    higher = higher_is_better(metric, rule)
    ok = math.isfinite(value) and (value >= rule.value if higher else value <= rule.value)
    bound = ">=" if higher else "<="
    prefix = f"slice {where}: " if where else ""
    message = f"{prefix}{metric} {_fmt(value)} {'meets' if ok else 'fails'} value threshold {bound} {_fmt(rule.value)}"
    return Check(metric, "value", ok, message, where)


def change_checks(
    metric: str,
    rule: Threshold,
    candidate: float,
    champion: float,
    *,
    diff: Interval | None = None,
    confidence: float = 0.95,
    where: str | None = None,
) -> list[Check]:
    """Absolute and relative change rules; improvement is measured in the better direction."""
    higher = higher_is_better(metric, rule)
    improvement = (candidate - champion) if higher else (champion - candidate)
    prefix = f"slice {where}: " if where else ""
    base = f"{prefix}{metric} {_fmt(candidate)} vs champion {_fmt(champion)}"
    checks = []
    if rule.change_abs is not None:
        ok = math.isfinite(improvement) and improvement >= rule.change_abs
        checks.append(
            Check(
                metric,
                "change_abs",
                ok,
                f"{base}: improvement {improvement:+.4f} {'>=' if ok else '<'} allowed change {rule.change_abs:+.4f}"
                + _noise_note(diff, confidence),
                where,
            )
        )
    if rule.change_rel is not None:
        relative = (
            improvement / abs(champion)
            if champion
            else (0.0 if improvement == 0 else math.copysign(math.inf, improvement))
        )
        ok = math.isfinite(improvement) and relative >= rule.change_rel
        checks.append(
            Check(
                metric,
                "change_rel",
                ok,
                f"{base}: relative improvement {relative:+.2%} {'>=' if ok else '<'} allowed {rule.change_rel:+.2%}"
                + _noise_note(diff, confidence),
                where,
            )
        )
    return checks


def judge(
    thresholds: dict[str, Threshold],
    candidate: dict[str, float],
    champion: dict[str, float] | None,
    *,
    differences: dict[str, Interval] | None = None,
    confidence: float = 0.95,
) -> list[Check]:
    """Every overall check; a missing metric fails its rule (a typo never blesses)."""
    checks: list[Check] = []
    for metric, rule in thresholds.items():
        if metric not in candidate:
            checks.append(
                Check(
                    metric,
                    "value",
                    False,
                    f"{metric} was not computed for this model (roc_auc needs two classes)",
                )
            )
            continue
        check = value_check(metric, rule, candidate[metric])
        if check is not None:
            checks.append(check)
        if champion is not None and metric in champion:
            diff = (differences or {}).get(metric)
            checks.extend(
                change_checks(
                    metric, rule, candidate[metric], champion[metric], diff=diff, confidence=confidence
                )
            )
    return checks


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
