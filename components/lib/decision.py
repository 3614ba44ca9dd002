"""One sentence per promotion decision: the same words in the run summary, the model card and the registry.

    Promoted v2: no worse than champion v1 on accuracy (Δ +0.004, 95% CI [-0.003, +0.011]; allowed +0.000)
    Kept v1: v2 is worse than champion v1 on log_loss (Δ -0.021, 95% CI [-0.035, -0.008]; allowed +0.000)
    Promoted v1: first model; beats the prior predictor on accuracy (gain +0.113, 95% CI [+0.081, +0.140])

Built from ``blessing.json`` (what evaluation decided and on which intervals) and what registration did.
"""

from __future__ import annotations

from typing import Any

from ctpipe.components.lib.config.gate_sections import metric_direction


def decision_sentence(blessing: dict[str, Any], *, version: str | None, promoted: bool,
                      champion: str | None = None, why_not_promoted: str = "") -> str:
    """The decision in one sentence: promoted or kept, against what, on which metric and interval.

    ``version`` is the candidate's registered version (None before registration), ``champion`` the champion
    it was compared with, ``why_not_promoted`` what stopped a blessed candidate (a lost compare-and-set, a
    failed serving check)."""
    candidate = f"v{version}" if version else "the candidate"
    compared = blessing.get("champion_version") or champion
    evidence = _evidence(blessing)
    if promoted:
        return f"Promoted {candidate}: {evidence}"
    if blessing.get("blessed"):
        kept = f"Kept v{compared}" if compared else "Not promoted"
        return f"{kept}: {candidate} passed evaluation ({evidence}) but {why_not_promoted or 'was not promoted'}"
    reason = (blessing.get("reasons") or ["no reason recorded"])[0]
    kept = f"Kept v{compared}" if compared else "Not promoted"
    return f"{kept}: {candidate} was not blessed ({reason})"


def _evidence(blessing: dict[str, Any]) -> str:
    """The interval the decision rests on: the change against the champion, else the gain over the baseline."""
    thresholds = blessing.get("thresholds") or {}
    confidence = _confidence(blessing)
    champion = blessing.get("champion_version")
    differences = blessing.get("differences") or {}
    for metric, rule in thresholds.items():
        allowed = (rule or {}).get("change_abs")
        if champion and metric in differences and allowed is not None:
            low, value, high = _improvement(_higher_is_better(blessing, metric), differences[metric])
            verdict = "no worse than" if blessing.get("blessed") else "worse than"
            return (f"{verdict} champion v{champion} on {metric} (Δ {value:+.3f}, {confidence} CI "
                    f"[{low:+.3f}, {high:+.3f}]; allowed {allowed:+.3f})")
    gains = blessing.get("baseline_differences") or {}
    baseline = blessing.get("baseline_name") or "the prior predictor"
    for metric in thresholds or gains:
        if metric in gains:
            low, value, high = _improvement(_higher_is_better(blessing, metric), gains[metric])
            first = "first model; " if not champion else ""
            return (f"{first}beats {baseline} on {metric} (gain {value:+.3f}, {confidence} CI "
                    f"[{low:+.3f}, {high:+.3f}])")
    return "; ".join(blessing.get("reasons") or []) or "no rule recorded"


def _higher_is_better(blessing: dict[str, Any], metric: str) -> bool:
    """The direction evaluation judged ``metric`` in: as it recorded it, else the rule's, else the name's
    (a blessing.json written before the record). Never the name first: ``bits_per_byte`` says nothing."""
    recorded = (blessing.get("higher_is_better") or {}).get(metric)
    if recorded is not None:
        return bool(recorded)
    direction = ((blessing.get("thresholds") or {}).get(metric) or {}).get("direction", "auto")
    if direction in ("higher", "lower"):
        return direction == "higher"
    return metric_direction(metric) != "min"


def _improvement(higher_is_better: bool, interval: dict[str, float]) -> tuple[float, float, float]:
    """(low, value, high) of candidate − reference read in the metric's better direction."""
    value, low, high = interval["value"], interval["low"], interval["high"]
    if not higher_is_better:
        return -high, -value, -low
    return low, value, high


def _confidence(blessing: dict[str, Any]) -> str:
    for interval in (blessing.get("differences") or blessing.get("baseline_differences") or {}).values():
        return f"{interval.get('confidence', 0.95):.0%}"
    return "95%"
