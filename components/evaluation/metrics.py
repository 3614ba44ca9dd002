"""Classification metrics, paired bootstrap intervals and ROC, in plain numpy.

Every metric is computed from integer labels ``y`` (N,) and class probabilities ``p`` (N, C).
Bootstrap resamples rows with replacement; the paired variant applies the SAME resampled rows to
candidate and champion, so the interval of their difference reflects only the test-set noise that
both models share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

# Name -> True when higher is better. Thresholds with direction "auto" resolve through this table.
METRICS: dict[str, bool] = {"accuracy": True, "macro_f1": True, "log_loss": False}
BINARY_METRICS: dict[str, bool] = {"roc_auc": True}
ALL_METRICS: dict[str, bool] = {**METRICS, **BINARY_METRICS}
_EPS = 1e-7


def confusion_matrix(y: np.ndarray, pred: np.ndarray, n_classes: int) -> np.ndarray:
    """Rows are true classes, columns predicted classes."""
    return np.bincount(y * n_classes + pred, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def _macro_f1_from_counts(cm: np.ndarray) -> np.ndarray:
    """Macro F1 over the classes present in truth or prediction; ``cm`` may carry leading batch axes."""
    tp = np.diagonal(cm, axis1=-2, axis2=-1).astype(np.float64)
    support = cm.sum(axis=-1)
    predicted = cm.sum(axis=-2)
    denom = support + predicted
    present = denom > 0
    f1 = np.where(present, 2 * tp / np.maximum(denom, 1), 0.0)
    return f1.sum(axis=-1) / np.maximum(present.sum(axis=-1), 1)


def roc_auc(y_pos: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with tie correction); NaN with one class only."""
    n_pos = int(y_pos.sum())
    n_neg = len(y_pos) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    from scipy.stats import rankdata

    ranks = rankdata(score)
    return float((ranks[y_pos.astype(bool)].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def compute_metrics(y: np.ndarray, p: np.ndarray) -> dict[str, float]:
    """Accuracy, macro F1 and log loss (plus ROC AUC for two classes)."""
    n_classes = p.shape[1]
    pred = p.argmax(axis=1)
    out = {
        "accuracy": float((pred == y).mean()) if len(y) else float("nan"),
        "macro_f1": float(_macro_f1_from_counts(confusion_matrix(y, pred, n_classes))),
        "log_loss": float(-np.log(np.clip(p[np.arange(len(y)), y], _EPS, 1.0)).mean())
        if len(y)
        else float("nan"),
    }
    if n_classes == 2:
        out["roc_auc"] = roc_auc(y == 1, p[:, 1])
    return out


def roc_curve(y_pos: np.ndarray, score: np.ndarray, max_points: int = 200) -> dict[str, list[float]]:
    """False/true positive rates by decreasing threshold, thinned to at most ``max_points`` points."""
    order = np.argsort(-score, kind="stable")
    s, t = score[order], y_pos[order].astype(np.int64)
    distinct = np.r_[np.nonzero(np.diff(s))[0], len(s) - 1]
    tps = np.cumsum(t)[distinct]
    fps = (distinct + 1) - tps
    n_pos, n_neg = max(int(t.sum()), 1), max(len(t) - int(t.sum()), 1)
    fpr = np.r_[0.0, fps / n_neg]
    tpr = np.r_[0.0, tps / n_pos]
    thresholds = np.r_[1.0, s[distinct]]
    if len(fpr) > max_points:
        keep = np.unique(np.linspace(0, len(fpr) - 1, max_points).round().astype(int))
        fpr, tpr, thresholds = fpr[keep], tpr[keep], thresholds[keep]
    return {"fpr": fpr.tolist(), "tpr": tpr.tolist(), "thresholds": thresholds.tolist()}


@dataclass
class Interval:
    """A point estimate with a two-sided percentile bootstrap interval."""

    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def contains_zero(self) -> bool:
        return self.low <= 0.0 <= self.high


def _bootstrap_chunks(n: int, samples: int, seed: int, max_cells: int = 4_000_000):
    """Resampled row indices in chunks of resamples, so memory stays bounded on large test sets."""
    rng = np.random.default_rng(seed)
    per_chunk = max(1, max_cells // max(n, 1))
    for start in range(0, samples, per_chunk):
        yield rng.integers(0, n, size=(min(per_chunk, samples - start), n))


def _metric_samples(y: np.ndarray, p: np.ndarray, idx: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric on every bootstrap resample (rows of ``idx``), vectorised over resamples."""
    n_classes = p.shape[1]
    pred = p.argmax(axis=1)
    correct = (pred == y).astype(np.float64)
    nll = -np.log(np.clip(p[np.arange(len(y)), y], _EPS, 1.0))
    samples = idx.shape[0]
    cells = (y * n_classes + pred)[idx] + (np.arange(samples) * n_classes * n_classes)[:, None]
    cm = np.bincount(cells.ravel(), minlength=samples * n_classes * n_classes).reshape(
        samples, n_classes, n_classes
    )
    out = {
        "accuracy": correct[idx].mean(axis=1),
        "macro_f1": _macro_f1_from_counts(cm),
        "log_loss": nll[idx].mean(axis=1),
    }
    if n_classes == 2:
        out["roc_auc"] = np.array([roc_auc(y[i] == 1, p[i, 1]) for i in idx])
    return out


def _interval(point: float, draws: np.ndarray, confidence: float) -> Interval:
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0:
        return Interval(point, point, point)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    return Interval(float(point), float(low), float(high))


def bootstrap_intervals(
    y: np.ndarray,
    p: np.ndarray,
    *,
    samples: int,
    confidence: float,
    seed: int,
    p_baseline: np.ndarray | None = None,
) -> tuple[dict[str, Interval], dict[str, Interval] | None]:
    """Intervals of each metric and, with a baseline, of the paired difference (model − baseline)."""
    point = compute_metrics(y, p)
    if samples <= 0 or len(y) == 0:
        single = {k: Interval(v, v, v) for k, v in point.items()}
        if p_baseline is None:
            return single, None
        base = compute_metrics(y, p_baseline)
        return single, {
            k: Interval(point[k] - base[k], point[k] - base[k], point[k] - base[k]) for k in point
        }
    model_draws: dict[str, list[np.ndarray]] = {k: [] for k in point}
    diff_draws: dict[str, list[np.ndarray]] = {k: [] for k in point}
    base_point = compute_metrics(y, p_baseline) if p_baseline is not None else None
    for idx in _bootstrap_chunks(len(y), samples, seed):
        draws = _metric_samples(y, p, idx)
        base = _metric_samples(y, p_baseline, idx) if p_baseline is not None else None
        for k in point:
            model_draws[k].append(draws[k])
            if base is not None:
                diff_draws[k].append(draws[k] - base[k])
    intervals = {k: _interval(point[k], np.concatenate(model_draws[k]), confidence) for k in point}
    if base_point is None:
        return intervals, None
    diffs = {k: _interval(point[k] - base_point[k], np.concatenate(diff_draws[k]), confidence) for k in point}
    return intervals, diffs
