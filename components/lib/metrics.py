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


def prior_probabilities(y: np.ndarray, n_classes: int) -> np.ndarray:
    """The trivial baseline: every row gets the class frequencies of ``y`` (its argmax is the majority class)."""
    freq = np.bincount(y, minlength=n_classes).astype(np.float64) / max(len(y), 1)
    return np.tile(freq, (len(y), 1))


@dataclass
class Interval:
    """A point estimate with an interval (percentile bootstrap, or bootstrap standard error × z)."""

    value: float
    low: float
    high: float
    # The two-sided confidence level of [low, high].
    confidence: float = 0.95

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def contains_zero(self) -> bool:
        return self.low <= 0.0 <= self.high

    def flipped(self) -> Interval:
        """The interval of the negated quantity (a lower-is-better difference read as an improvement)."""
        return Interval(-self.value, -self.high, -self.low, self.confidence)


# --- the paired bootstrap ---------------------------------------------------------------------------


def resample_weights(n: int, samples: int, seed: int, max_cells: int = 4_000_000):
    """How often each row is drawn in each resample, in chunks of resamples (memory stays bounded). Public:
    a task's own paired bootstrap (``Task.paired_bootstrap``, e.g. ``causal_lm``'s over documents) draws the
    same weights as the evaluation's for the same seed."""
    rng = np.random.default_rng(seed)
    per_chunk = max(1, max_cells // max(n, 1))
    for start in range(0, samples, per_chunk):
        k = min(per_chunk, samples - start)
        idx = rng.integers(0, n, size=(k, n))
        idx += (np.arange(k) * n)[:, None]  # one bincount for the whole chunk
        yield np.bincount(idx.ravel(), minlength=k * n).reshape(k, n).astype(np.float64)


def _row_statistics(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per-row columns whose weighted sums give every metric: correct, NLL, then per class the true
    positive, label and prediction indicators (so one matrix product scores all resamples)."""
    n_classes = p.shape[1]
    pred = p.argmax(axis=1)
    onehot_y = np.eye(n_classes)[y]
    onehot_pred = np.eye(n_classes)[pred]
    correct = (pred == y).astype(np.float64)
    nll = -np.log(np.clip(p[np.arange(len(y)), y], _EPS, 1.0))
    return np.column_stack([correct, nll, onehot_y * correct[:, None], onehot_y, onehot_pred])


def _metrics_from_sums(sums: np.ndarray, total: np.ndarray, n_classes: int) -> dict[str, np.ndarray]:
    tp = sums[:, 2 : 2 + n_classes]
    support = sums[:, 2 + n_classes : 2 + 2 * n_classes]
    predicted = sums[:, 2 + 2 * n_classes :]
    denom = support + predicted
    present = denom > 0
    f1 = np.where(present, 2 * tp / np.maximum(denom, 1e-12), 0.0)
    return {
        "accuracy": sums[:, 0] / total,
        "macro_f1": f1.sum(axis=1) / np.maximum(present.sum(axis=1), 1),
        "log_loss": sums[:, 1] / total,
    }


def _weighted_auc(w: np.ndarray, y_pos: np.ndarray, score: np.ndarray) -> np.ndarray:
    """ROC AUC of every weighted resample (rows of ``w``): the Mann-Whitney statistic with ties as 1/2."""
    order = np.argsort(score, kind="stable")
    s, pos = score[order], y_pos[order].astype(np.float64)
    w = w[:, order]
    w_pos, w_neg = w * pos, w * (1.0 - pos)
    cum_neg = np.concatenate([np.zeros((len(w), 1)), np.cumsum(w_neg, axis=1)], axis=1)
    new_group = np.r_[True, s[1:] != s[:-1]]
    start = np.maximum.accumulate(np.where(new_group, np.arange(len(s)), 0))
    end = np.r_[np.flatnonzero(new_group)[1:], len(s)]
    end = end[np.cumsum(new_group) - 1]
    below = cum_neg[:, start]
    ties = cum_neg[:, end] - below
    total = w_pos.sum(axis=1) * w_neg.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (w_pos * (below + 0.5 * ties)).sum(axis=1) / total, np.nan)


def _weighted_metrics(w: np.ndarray, y: np.ndarray, p: np.ndarray) -> dict[str, np.ndarray]:
    """Every metric on every weighted resample (rows of ``w``), vectorised over resamples."""
    out = _metrics_from_sums(w @ _row_statistics(y, p), w.sum(axis=1), p.shape[1])
    if p.shape[1] == 2:
        out["roc_auc"] = _weighted_auc(w, y == 1, p[:, 1])
    return out


def paired_bootstrap(
    y: np.ndarray, models: dict[str, np.ndarray], *, samples: int, seed: int
) -> dict[str, dict[str, np.ndarray]]:
    """Each metric of each model on the SAME ``samples`` resamples of the rows: draws[model][metric]."""
    if len(y) == 0 or samples <= 0:
        return {name: {} for name in models}
    names = list(models)
    n_classes = next(iter(models.values())).shape[1]
    stats = [_row_statistics(y, models[name]) for name in names]
    width = stats[0].shape[1]
    stacked = np.hstack(stats)  # every model's row statistics: one matrix product per chunk
    draws: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in names}
    for w in resample_weights(len(y), samples, seed):
        sums, total = w @ stacked, w.sum(axis=1)
        for i, name in enumerate(names):
            found = _metrics_from_sums(sums[:, i * width : (i + 1) * width], total, n_classes)
            if n_classes == 2:
                found["roc_auc"] = _weighted_auc(w, y == 1, models[name][:, 1])
            for metric, values in found.items():
                draws[name].setdefault(metric, []).append(values)
    return {name: {m: np.concatenate(v) for m, v in per.items()} for name, per in draws.items()}


def small_sample_widening(units: int | None, confidence: float) -> float:
    """How much wider than the plain bootstrap an interval over ``units`` resampled units (rows, documents) must be:
    sqrt(n/(n-1)) × t_{n-1} / z at the interval's level (Hesterberg's expanded percentile interval). The bootstrap
    spread is the plug-in one, narrower than the standard error by sqrt((n-1)/n), and the normal quantile ignores
    that the spread is itself estimated; both under-cover at ~100 units (the LM blessing's documents), and the
    factor is 1.0003 at 5,000 rows. 1 when ``units`` is not known."""
    if units is None or units < 2:
        return 1.0
    from scipy.stats import norm, t

    q = 1 - (1 - confidence) / 2
    return float(np.sqrt(units / (units - 1)) * t.ppf(q, units - 1) / norm.ppf(q))


def percentile_interval(
    point: float, draws: np.ndarray, confidence: float, units: int | None = None
) -> Interval:
    """The percentile bootstrap interval (NaN draws, e.g. AUC on a one-class resample, are left out), expanded
    about the point by ``small_sample_widening(units)``."""
    draws = draws[np.isfinite(draws)]
    if len(draws) == 0 or not np.isfinite(point):
        return Interval(float(point), float(point), float(point), confidence)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(draws, [alpha, 1 - alpha])
    widen = small_sample_widening(units, confidence)
    low, high = point - widen * (point - low), point + widen * (high - point)
    return Interval(float(point), float(low), float(high), confidence)


def normal_interval(point: float, draws: np.ndarray, confidence: float, units: int | None = None) -> Interval:
    """point ± z × the bootstrap standard error (× ``small_sample_widening(units)``: the t quantile and the n/(n-1)
    variance): stable at the extreme levels of a multiple-comparison correction, where 1,000 resamples leave
    too few draws in a percentile tail."""
    from scipy.stats import norm

    draws = draws[np.isfinite(draws)]
    if len(draws) < 2 or not np.isfinite(point):
        return Interval(float(point), float(point), float(point), confidence)
    widen = small_sample_widening(units, confidence)
    half = float(norm.ppf(1 - (1 - confidence) / 2) * draws.std(ddof=1)) * widen
    return Interval(float(point), float(point) - half, float(point) + half, confidence)


def sign_flip_rank(confidence: float, samples: int) -> int:
    """k = floor(alpha/2 · (samples + 1)): each bound of ``sign_flip_interval`` is the k-th most extreme of its
    ``samples`` ratios, and k / (samples + 1) <= alpha/2 its exact one-sided level (0: nothing can be rejected)."""
    return int(np.floor((1 - confidence) / 2 * (samples + 1) + 1e-9))


def sign_flip_interval(
    point: float, differences: np.ndarray, weights: np.ndarray, confidence: float, *, samples: int,
    seed: int | list[int],
) -> Interval:
    """The paired randomization (sign-flip) interval of sum(differences) / sum(weights): a metric that is a ratio of
    per-unit sums with the SAME denominators for both models (a causal LM's NLL over its documents' tokens or
    bytes), ``differences`` being candidate − reference per unit.

    Each bound inverts the one-sided sign-flip test of "the per-unit residuals d_i − delta·w_i are symmetric about
    0": delta is kept while at least k = floor(alpha/2 · (samples + 1)) of the ``samples`` random sign vectors give
    a residual sum at least as extreme (the observed one counts as one more, Phipson and Smyth). Flipping the
    units of F turns that into sum_F d / sum_F w >= delta, so each bound is the k-th most extreme ratio over the
    random subsets F. When the two models are exchangeable per unit (equal in distribution), the bound excludes
    the true difference with probability k / (samples + 1) <= alpha/2 over the coin and the draws, for ANY number
    of units and any tails: the guarantee the bootstrap gives only asymptotically, and missed at ~100 documents of
    very unequal lengths (the paired approximate-randomization test of comparing two systems on one test set)."""
    d = np.asarray(differences, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    k = sign_flip_rank(confidence, samples)
    if k < 1:  # too few draws to reject anything at this level: the interval excludes nothing
        return Interval(float(point), -np.inf, np.inf, confidence)
    if len(d) == 0 or not np.isfinite(point):
        return Interval(float(point), float(point), float(point), confidence)
    rng = np.random.default_rng(seed)
    columns = np.column_stack([d, w])
    per_chunk = max(1, 4_000_000 // len(d))
    upper, lower = [], []
    for start in range(0, samples, per_chunk):
        rows = min(per_chunk, samples - start)
        bits = np.unpackbits(np.frombuffer(rng.bytes(rows * ((len(d) + 7) // 8)), dtype=np.uint8))
        flipped = bits.reshape(rows, -1)[:, : len(d)].astype(np.float64)  # 1: the unit's sign is flipped
        num, den = (flipped @ columns).T
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = num / den
        # A subset with no weight tests sum_F d >= 0 (or <= 0) whatever delta is: it always, or never, counts.
        upper.append(np.where(den > 0, ratio, np.where(num >= 0, np.inf, -np.inf)))
        lower.append(np.where(den > 0, ratio, np.where(num <= 0, -np.inf, np.inf)))
    high = float(-np.partition(-np.concatenate(upper), k - 1)[k - 1])
    low = float(np.partition(np.concatenate(lower), k - 1)[k - 1])
    return Interval(float(point), low, high, confidence)


def bootstrap_intervals(
    y: np.ndarray,
    p: np.ndarray,
    *,
    samples: int,
    confidence: float,
    seed: int,
    p_baseline: np.ndarray | None = None,
) -> tuple[dict[str, Interval], dict[str, Interval] | None]:
    """Percentile intervals (expanded for few rows) of each metric and, with a baseline, of the paired difference
    (model − baseline)."""
    point = compute_metrics(y, p)
    models = {"model": p} if p_baseline is None else {"model": p, "baseline": p_baseline}
    draws = paired_bootstrap(y, models, samples=samples, seed=seed)
    empty = np.array([])
    intervals = {
        k: percentile_interval(v, draws["model"].get(k, empty), confidence, len(y)) for k, v in point.items()
    }
    if p_baseline is None:
        return intervals, None
    base = compute_metrics(y, p_baseline)
    diffs = {
        k: percentile_interval(
            point[k] - base[k],
            draws["model"].get(k, empty) - draws["baseline"].get(k, empty) if k in draws["model"] else empty,
            confidence,
            len(y),
        )
        for k in point
    }
    return intervals, diffs
