"""The built-in ``tabular_regression`` task: numeric and categorical columns in, one real number out.

Rows become ``(x_num, x_cat)`` exactly as for classification (``components/lib/data/encoding.py``); the target
is the label standardised with the train split's mean and std, so the loss at initialisation is the label's
variance in those units (1 on the train split) whatever the label's scale. The loss is MSE (``loss="huber"``
for Huber); test metrics are RMSE, MAE (lower is better) and R² (higher), in the label's own units; the
input-independent baseline is the mean predictor (the train split's mean).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.demo_regression import DEMO_SETTINGS, write_regression_demo
from ctpipe.components.lib.data.encoding import Preprocessing
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.tasks.image_columns import Image
from ctpipe.components.tasks.protocol import Batch, InitLoss, Metric, TaskState
from ctpipe.components.tasks.spec import TaskSpec
from ctpipe.components.tasks.tabular_common import TabularFamily, zero_unknown_category_slots

if TYPE_CHECKING:
    import torch
    from torch import nn

# Torch's default init gives outputs of their own spread around zero: a loose bound, reported only.
DEFAULT_INIT_TOLERANCE = 0.5
# Quantile bins of the label the sanity sample is stratified by (a continuous label has no classes).
STRATA_BINS = 10


def label_values(frame: pd.DataFrame, label: str) -> np.ndarray:
    """The label column as float64; DataValidationError naming the column when a value is not a number."""
    values = pd.to_numeric(frame[label], errors="coerce")
    bad = values.isna() & frame[label].notna()
    if bad.any():
        examples = sorted({str(v) for v in frame[label][bad].head(5)})
        raise DataValidationError(f"label column '{label}' holds non-numeric value(s) {examples}; a regression "
                                  "label must be a number on every row")
    return values.to_numpy(dtype="float64")


def regression_metrics(targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """RMSE, MAE and R² (1 - SSE/SST around the scored rows' own mean; 0 when the targets are constant)."""
    error = predictions - targets
    sse = float(np.sum(error**2))
    sst = float(np.sum((targets - targets.mean()) ** 2)) if len(targets) else 0.0
    n = max(len(targets), 1)
    return {"rmse": float(np.sqrt(sse / n)), "mae": float(np.mean(np.abs(error))) if len(targets) else 0.0,
            "r2": 1.0 - sse / sst if sst > 0 else 0.0}


def paired_regression_bootstrap(targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                                seed: int) -> dict[str, dict[str, np.ndarray]]:
    """RMSE, MAE and R² of each model on the SAME resamples of the rows: weighted sums of the squared and
    absolute errors (one matrix product per chunk of resamples, the evaluation's own resample weights)."""
    from ctpipe.components.lib.metrics import resample_weights

    n = len(targets)
    draws: dict[str, dict[str, list[np.ndarray]]] = {name: {"rmse": [], "mae": [], "r2": []} for name in models}
    if n == 0 or samples <= 0:
        return {name: {} for name in models}
    for weights in resample_weights(n, samples, seed):
        mean = weights @ targets / n
        sst = weights @ targets**2 - n * mean**2
        for name, predictions in models.items():
            error = predictions - targets
            sse = weights @ error**2
            draws[name]["rmse"].append(np.sqrt(sse / n))
            draws[name]["mae"].append(weights @ np.abs(error) / n)
            draws[name]["r2"].append(np.where(sst > 0, 1.0 - sse / np.where(sst > 0, sst, 1.0), 0.0))
    return {name: {m: np.concatenate(v) for m, v in per.items()} for name, per in draws.items()}


class TabularRegression(TabularFamily):
    """Regression of tabular rows by an MLP or an FT-Transformer (``model.kind``) with one output."""

    name = "tabular_regression"
    label_kind = "continuous"
    baseline_name = "the mean predictor"
    metrics = (Metric("rmse", False), Metric("mae", False), Metric("r2", True))
    # The demo data (``ctpipe demo-data --task tabular_regression``) and the settings that go with it.
    write_demo_data = staticmethod(write_regression_demo)
    demo_settings = DEMO_SETTINGS
    # Select by validation loss; bless on beating the mean predictor on RMSE and MAE, no regression on them. A third
    # of the classifier's learning rate: started at the ridge fit (``fit``), the model only refines it, and at 3e-3
    # its ~30 steps on a small table moved it off the fit (diabetes RMSE 61.8 against ridge's 61.5; 1e-3: 60.2-61.0
    # over 3 seeds, docs/performance.md).
    config_defaults = (
        "select.metric=val_loss", "registry.model_name=ctpipe-regression", "train.lr=1e-3",
        "evaluate.thresholds={rmse: {value: baseline, change_abs: 0.0}, mae: {value: baseline, change_abs: 0.0}}",
    )

    def __init__(self, *, loss: Literal["mse", "huber"] = "mse", huber_delta: float = 1.0,
                 images: tuple[Image, ...] = ()) -> None:
        super().__init__(images=images)
        if loss not in ("mse", "huber"):
            raise ValueError(f"task.options.loss must be 'mse' or 'huber', got {loss!r}")
        if not huber_delta > 0:
            raise ValueError(f"task.options.huber_delta must be > 0 (in standard deviations of the label), got {huber_delta!r}")
        self.loss_name, self.huber_delta = loss, float(huber_delta)

    # -- data -------------------------------------------------------------------------------------
    def fit(self, train: pd.DataFrame, schema: Schema) -> TaskState:
        """Feature statistics as for classification, and the label's train mean and std."""
        y = label_values(train, schema.label)
        y = y[np.isfinite(y)]
        std = float(y.std()) if len(y) > 1 else 1.0
        target = {"mean": float(y.mean()) if len(y) else 0.0, "std": std if std > 1e-12 else 1.0}
        state = {**self.fit_features(train, schema, []), "target": target}
        # A small table: the linear path's start, ridge regression on the numeric inputs (linear_fit.py).
        known = np.isfinite(label_values(train, schema.label))
        x = self.linear_inputs(train[known], state) if known.sum() > 1 else None
        if x is None:
            return state
        from ctpipe.components.lib.models.linear_fit import ridge_fit

        z = (label_values(train[known], schema.label) - target["mean"]) / target["std"]
        return {**state, "linear": ridge_fit(x, z)}

    def encode(self, frame: pd.DataFrame, state: TaskState) -> Batch:
        import torch

        y = (label_values(frame, state["label"]) - state["target"]["mean"]) / state["target"]["std"]
        inputs = tuple(torch.tensor(a) for a in self.model_arrays(frame, state))  # copies: views may be read-only
        return Batch(inputs, torch.tensor(y, dtype=torch.float32))

    def strata(self, frame: pd.DataFrame, schema: Schema) -> pd.Series | None:
        if schema.label not in frame.columns:
            return None
        values = pd.to_numeric(frame[schema.label], errors="coerce")
        return pd.qcut(values.rank(method="first"), min(STRATA_BINS, max(len(values), 1)), labels=False)

    # -- model ------------------------------------------------------------------------------------
    def build_model(self, config: Any, state: TaskState) -> nn.Module:
        from ctpipe.components.lib.models.tabular import InputSpec, build_model

        prep = Preprocessing.from_dict(state)
        return build_model(config.model, InputSpec(len(prep.numeric), prep.cardinalities, 1))

    def init_model(self, model: nn.Module, state: TaskState, train_targets: torch.Tensor) -> None:
        import torch

        from ctpipe.components.lib.models.tabular import init_linear_path

        # The output starts near the mean predictor (0 in standardised units), or on a small table at the ridge
        # fit (``fit``) through the linear path; the unknown category slot carries no information, as for
        # classification.
        with torch.no_grad():
            if hasattr(model, "head"):
                model.head.weight.mul_(0.01)
                model.head.bias.zero_()
                init_linear_path(model, state.get("linear"))
        zero_unknown_category_slots(model)

    # -- objective --------------------------------------------------------------------------------
    def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        prediction = outputs.float().reshape(-1)
        if self.loss_name == "huber":
            return F.huber_loss(prediction, targets.float(), reduction="none", delta=self.huber_delta)
        return F.mse_loss(prediction, targets.float(), reduction="none")

    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.row_losses(outputs, targets).mean()

    def row_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        # In standard deviations of the label: the trainer has no state to convert back.
        return {"abs_error": (outputs.float().reshape(-1) - targets.float()).abs().double()}

    # -- sanity -----------------------------------------------------------------------------------
    def init_losses(self, targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
        import torch

        # With a zero output the loss is the sample label's spread around the train mean: its variance
        # (plus the squared offset of its mean) in standard deviations of the train label.
        expected = float(self.loss(torch.zeros_like(targets, dtype=torch.float32), targets))

        def zero_output(model) -> None:
            with torch.no_grad():
                model.head.weight.zero_()
                model.head.bias.zero_()

        hint = ("; the loss at init is not the label's variance: check that the model has one output, that the "
                "loss compares it with the standardised label, and the output layer")
        return [
            InitLoss("init_loss_default", expected, DEFAULT_INIT_TOLERANCE * max(expected, 1.0),
                     f"the label's variance {expected:.4f} (train units) with torch's default initialisation "
                     "(reported only: the trainer initialises the head itself)", severity="warning"),
            InitLoss("init_loss_mean", expected, tolerance * max(expected, 1.0),
                     f"the label's variance {expected:.4f} (train units) with the output at the train mean",
                     hint=hint, initialise=zero_output, applies=lambda model: hasattr(model, "head")),
        ]

    # -- evaluation and serving -------------------------------------------------------------------
    def targets(self, frame: pd.DataFrame, state: TaskState) -> np.ndarray:
        return label_values(frame, state["label"])

    def predict(self, model: nn.Module, frame: pd.DataFrame, state: TaskState, reference: TaskState) -> np.ndarray:
        """Predictions in the label's units (each model undoes its own standardisation, so a champion and a
        candidate fitted on different train splits score the same targets)."""
        out = [z.reshape(-1).astype(np.float64) for z in self.model_outputs(model, frame, state)]
        z = np.concatenate(out) if out else np.zeros(0, dtype=np.float64)
        return z * state["target"]["std"] + state["target"]["mean"]

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        return regression_metrics(targets, predictions)

    def paired_bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                         seed: int) -> dict[str, dict[str, np.ndarray]]:
        return paired_regression_bootstrap(targets, models, samples=samples, seed=seed)

    def baseline(self, targets: np.ndarray, state: TaskState) -> np.ndarray | None:
        """The mean predictor: the train split's mean label for every row."""
        return np.full(len(targets), float(state["target"]["mean"]))

    def serve(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> pd.DataFrame:
        return pd.DataFrame({"prediction": self.predict(model, frame, state, state)})


def make_task(**options: Any) -> TaskSpec:
    """The factory ``task.name: tabular_regression`` resolves to (``task.options``: loss, huber_delta)."""
    return TabularRegression(**options).spec()
