"""Drift of the predictions: the candidate on the new test split against what the champion predicted on its own.

At every evaluation the candidate's predictions on its test split are summarised (``prediction_reference``:
the predicted class counts for a task that names its classes, else a seeded sample and the percentiles of
the predicted values). Registration keeps that summary beside the reference statistics
(``reference/predictions.json`` on the model's run); the next evaluation compares its candidate's
predictions on the new test split with the champion's summary (``prediction_drift``).

As for the features (``ctpipe watch``), the verdict needs both an effect above its threshold and a p-value
under "same distribution" below ``watch.max_p_value``, so the bound is calibrated on both sample sizes,
never two point estimates compared: classes by the chi-square test of the two count vectors (effect:
Cramér's V, threshold ``watch.cramers_v_threshold``); values by the two-sample Kolmogorov-Smirnov test (effect:
D, threshold ``watch.ks_threshold``). ``watch.column_thresholds.prediction`` overrides either (0 disables it).
The verdict is reported (blessing, model card, run metric), not a blessing rule: the data moved, or the model
reads it differently; the metrics against the champion on the same rows decide the blessing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from ctpipe.components.lib.config import WatchConfig

SAMPLE_SIZE = 5000
SAMPLE_SEED = 0
COLUMN = "prediction"  # its name in watch.column_thresholds


def prediction_reference(predictions: np.ndarray, class_names: list[str]) -> dict[str, Any] | None:
    """A JSON summary of a model's predictions on its test split: class counts (class probabilities), or a
    sample and percentiles (one value a row); None for other predictions (``causal_lm``'s per-document losses)."""
    if class_names:
        counts = np.bincount(np.asarray(predictions).argmax(axis=1), minlength=len(class_names))
        return {"kind": "classes", "rows": int(len(predictions)),
                "counts": {name: int(c) for name, c in zip(class_names, counts, strict=True)}}
    values = np.asarray(predictions, dtype=np.float64)
    if values.ndim != 1:
        return None
    values = values[np.isfinite(values)]
    rng = np.random.default_rng(SAMPLE_SEED)
    sample = values if len(values) <= SAMPLE_SIZE else rng.choice(values, SAMPLE_SIZE, replace=False)
    return {"kind": "values", "rows": int(len(predictions)),
            "quantiles": np.quantile(values, np.linspace(0, 1, 101)).tolist() if len(values) else [],
            "sample": sorted(float(v) for v in sample)}


def prediction_drift(reference: dict[str, Any], current: dict[str, Any], watch: WatchConfig) -> dict[str, Any]:
    """The candidate's summary ``current`` against the champion's ``reference``: statistic, value, p-value,
    threshold and whether it drifted; ``comparable`` is False (with ``reason``) when the two cannot be compared."""
    overrides = watch.column_thresholds.get(COLUMN, {})
    if reference.get("kind") != current.get("kind"):
        return {"comparable": False, "drifted": False,
                "reason": f"the champion's predictions are {reference.get('kind')}, the candidate's {current.get('kind')}"}
    if current["kind"] == "classes":
        names = sorted(set(reference["counts"]) | set(current["counts"]))
        table = np.array([[reference["counts"].get(n, 0) for n in names], [current["counts"].get(n, 0) for n in names]])
        table = table[:, table.sum(axis=0) > 0]
        statistic, threshold = "cramers_v", float(overrides.get("cramers_v", watch.cramers_v_threshold))
        if table.shape[1] < 2 or table.sum(axis=1).min() == 0:
            value, p_value = 0.0, 1.0  # one class predicted on both sides (or no rows): nothing moved
        else:
            # The effect, as the watcher's: Cramér's V of the candidate's counts against the champion's shares
            # (a class the champion never predicted gets half a count), whatever the reference's size; the
            # p-value from the two-sample chi-square test, since the reference is a sample too.
            ref, cur = table[0], table[1]
            expected = (ref + 0.5) / (ref.sum() + 0.5 * len(ref)) * cur.sum()
            value = float(np.sqrt(np.sum((cur - expected) ** 2 / expected) / (cur.sum() * (len(ref) - 1))))
            p_value = float(stats.chi2_contingency(table, correction=False)[1])
        shares = {"reference": _shares(reference["counts"]), "current": _shares(current["counts"])}
    else:
        statistic, threshold = "ks", float(overrides.get("ks", watch.ks_threshold))
        if not reference["sample"] or not current["sample"]:
            return {"comparable": False, "drifted": False, "reason": "no finite prediction on one side"}
        result = stats.ks_2samp(reference["sample"], current["sample"])
        value, p_value = float(result.statistic), float(result.pvalue)
        shares = {"reference": _deciles(reference["quantiles"]), "current": _deciles(current["quantiles"])}
    drifted = threshold > 0 and value > threshold and p_value < watch.max_p_value
    return {"comparable": True, "statistic": statistic, "value": value, "p_value": float(p_value),
            "threshold": threshold, "max_p_value": watch.max_p_value, "drifted": bool(drifted),
            "reference_rows": int(reference["rows"]), "rows": int(current["rows"]), **shares}


def describe(drift: dict[str, Any]) -> str:
    """One sentence for the blessing's reasons and the model card."""
    if not drift.get("comparable"):
        return f"prediction drift not judged: {drift.get('reason')}"
    verdict = "drifted" if drift["drifted"] else "no drift"
    return (f"prediction drift against the champion's own test predictions: {verdict} ({drift['statistic']} "
            f"{drift['value']:.4f}, threshold {drift['threshold']:g}; p {drift['p_value']:.2g}, drift needs "
            f"< {drift['max_p_value']:g}; {drift['rows']} rows vs {drift['reference_rows']})")


def _shares(counts: dict[str, int]) -> dict[str, float]:
    total = max(sum(counts.values()), 1)
    return {name: round(c / total, 4) for name, c in counts.items()}


def _deciles(quantiles: list[float]) -> list[float]:
    return [round(float(q), 6) for q in quantiles[::10]] if quantiles else []
