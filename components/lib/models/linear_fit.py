"""The closed-form start of the default tabular model's linear path: ridge or logistic regression on the numeric
inputs of the train split, fitted by the codec (``fit``) and copied into the model by its ``init``.

A residual MLP trained for the ~30 optimizer steps a few hundred rows give does not recover a linear fit within
noise of least squares (diabetes: RMSE 1.03-1.10x ridge's); started from the fit, it only has to learn what a
linear model misses, and early stopping on val keeps a checkpoint no worse than its start by much.
Plain float64 numpy and scipy (the validate step, which fits it, never imports torch); the result is plain JSON (it is stored in the task's state).
"""

from __future__ import annotations

import numpy as np

# Rows and numeric columns the fit uses at most: beyond them a model gets enough optimizer steps to find the
# linear part itself, and the state (which holds classes x columns numbers) stays small.
MAX_ROWS = 20_000
MAX_FEATURES = 512
# Ridge penalties (per row, on standardised features) among which generalised cross-validation chooses.
RIDGE_PENALTIES = tuple(float(p) for p in np.logspace(-4, 2, 25))
# Logistic regression's L2 penalties (per row) among which 3-fold cross-validation on train chooses (by log loss);
# the large ones leave labels unrelated to the inputs (shuffled) nearly at the prior, not at a fit of their noise.
LOGISTIC_PENALTIES = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
FOLDS = 3
LBFGS_STEPS = 200


def ridge_fit(x: np.ndarray, y: np.ndarray) -> dict[str, list]:
    """Ridge regression of ``y`` on ``x`` (unpenalised intercept), the penalty chosen by generalised
    cross-validation (one SVD for every penalty): ``{"weight": [[d floats]], "bias": [1 float]}``."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = len(y)
    x_mean, y_mean = x.mean(axis=0), float(y.mean())
    u, s, vt = np.linalg.svd(x - x_mean, full_matrices=False)
    uy = u.T @ (y - y_mean)
    best: tuple[float, np.ndarray] | None = None
    for penalty in RIDGE_PENALTIES:
        shrink = s**2 / (s**2 + penalty * n)
        residual = (y - y_mean) - u @ (shrink * uy)
        gcv = float(np.mean(residual**2)) / max(1.0 - (shrink.sum() + 1.0) / n, 1e-6) ** 2
        if best is None or gcv < best[0]:
            best = (gcv, vt.T @ (s / (s**2 + penalty * n) * uy))
    weight = best[1] if best is not None else np.zeros(x.shape[1])
    return {"weight": [[float(w) for w in weight]], "bias": [y_mean - float(x_mean @ weight)]}


def logistic_fit(x: np.ndarray, y: np.ndarray, classes: int) -> dict[str, list]:
    """Multinomial logistic regression of class indices ``y`` on ``x`` (``logistic_regression``), its penalty
    chosen by ``FOLDS``-fold cross-validation on these rows (every FOLDS-th row held out: deterministic)."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.int64)
    folds = np.arange(len(y)) % FOLDS

    def held_out_loss(penalty: float) -> float:
        total = 0.0
        for k in range(FOLDS):
            fit = logistic_regression(x[folds != k], y[folds != k], classes, penalty)
            logits = x[folds == k] @ np.asarray(fit["weight"]).T + np.asarray(fit["bias"])
            logits -= logits.max(axis=1, keepdims=True)
            log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
            total -= float(log_p[np.arange(len(log_p)), y[folds == k]].sum())
        return total

    return logistic_regression(x, y, classes, min(LOGISTIC_PENALTIES, key=held_out_loss))


def logistic_regression(x: np.ndarray, y: np.ndarray, classes: int, penalty: float) -> dict[str, list]:
    """Multinomial logistic regression of class indices ``y`` on ``x`` by L-BFGS (L2 ``penalty`` per row on the
    weights, not the bias): ``{"weight": [classes x d], "bias": [classes]}`` (logits ``x @ weight.T + bias``).

    numpy and scipy, not torch: the codec fits it in the validate step, which never imports torch."""
    from scipy.optimize import minimize

    n, d = x.shape
    onehot = np.eye(classes)[y]
    prior = np.bincount(y, minlength=classes).astype(np.float64) + 1.0  # smoothed: a class absent from these rows
    start = np.concatenate([np.zeros(classes * d), np.log(prior / prior.sum())])

    def loss_and_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
        weight, bias = theta[: classes * d].reshape(classes, d), theta[classes * d:]
        logits = x @ weight.T + bias
        logits -= logits.max(axis=1, keepdims=True)
        log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
        loss = -float((onehot * log_p).sum()) / n + 0.5 * penalty * float((weight**2).sum())
        residual = (np.exp(log_p) - onehot) / n
        gradient = np.concatenate([(residual.T @ x + penalty * weight).ravel(), residual.sum(axis=0)])
        return loss, gradient

    result = minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B",
                      options={"maxiter": LBFGS_STEPS, "gtol": 1e-7})
    w, b = result.x[: classes * d].reshape(classes, d), result.x[classes * d:]
    if not (np.isfinite(w).all() and np.isfinite(b).all()):  # never start a model from a diverged fit
        w, b = np.zeros_like(w), np.zeros_like(b)
    return {"weight": [[float(v) for v in row] for row in w], "bias": [float(v) for v in b]}


def fits(rows: int, features: int) -> bool:
    """Whether a table of this size gets a closed-form start (small tables: see ``MAX_ROWS``)."""
    return 0 < rows <= MAX_ROWS and 0 < features <= MAX_FEATURES
