"""The built-in ``tabular_classification`` task: numeric and categorical columns in, class probabilities out.

Rows become ``(x_num, x_cat)`` (standardised numerics, vocabulary indices; ``components/lib/data/snapshot.py``)
and class-index targets; the models are ``components/lib/models/tabular.py`` (MLP or FT-Transformer); the
loss is cross-entropy with the head's bias at the log class prior; metrics are accuracy, macro F1 and
log loss (ROC AUC with two classes).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.data.encoding import Preprocessing, encode_labels, preprocessing_of
from ctpipe.components.lib.data.reference_stats import table_stats
from ctpipe.components.lib.data.snapshot import Schema
from ctpipe.components.tasks.protocol import Batch, InitLoss, Metric, TaskState
from ctpipe.components.tasks.spec import TaskSpec
from ctpipe.components.tasks.tabular_common import TabularFamily, zero_unknown_category_slots

if TYPE_CHECKING:  # torch is imported where a method needs it: validation reads the task's data side only
    import torch
    from torch import nn

# Torch's default init leaves logits with a spread of their own: a loose bound, and a warning only.
DEFAULT_INIT_TOLERANCE = 0.25


def class_prior(y: torch.Tensor, n_classes: int) -> torch.Tensor:
    """Each class's share of the labels ``y`` (float64)."""
    import torch

    counts = torch.bincount(y, minlength=n_classes).double()
    return counts / counts.sum()


def align_probabilities(probs: np.ndarray, model_classes: list[str], target_classes: list[str]) -> np.ndarray:
    """Reorder a model's class probabilities into ``target_classes``; classes it never saw get 0."""
    out = np.zeros((len(probs), len(target_classes)), dtype=np.float64)
    index = {c: i for i, c in enumerate(model_classes)}
    for j, name in enumerate(target_classes):
        if name in index:
            out[:, j] = probs[:, index[name]]
    return out


class TabularClassification(TabularFamily):
    """Classification of tabular rows by an MLP or an FT-Transformer (``model.kind``)."""

    name = "tabular_classification"
    metrics = (Metric("accuracy", True), Metric("macro_f1", True), Metric("log_loss", False),
               Metric("roc_auc", True))
    # ctpipe's default rules (beat the prior predictor with evidence, no regression against the champion) on
    # accuracy and log loss, and macro F1 against the baselines too: a loss that trades the rare classes away keeps
    # accuracy and loses macro F1 (a first model is held to the linear baseline on each: evaluate.beat_linear).
    config_defaults = (
        "evaluate.thresholds={accuracy: {value: baseline, change_abs: 0.0}, log_loss: {value: baseline, "
        "change_abs: 0.0}, macro_f1: {value: baseline}}",
    )

    # -- data -------------------------------------------------------------------------------------
    def fit(self, train: pd.DataFrame, schema: Schema) -> TaskState:
        """``fit_streamed``'s numbers (the statistics of one frame are those of its batches merged), or with image
        columns the pixel statistics too; on a small table also the linear path's start (``linear``: a logistic
        regression on the numeric inputs, ``components/lib/models/linear_fit.py``)."""
        if self.images:  # the pixel statistics need the rows themselves
            state = self.fit_features(train, schema, schema.classes)
        else:
            state = self.streamed_state(table_stats(train, schema), schema)
        x = self.linear_inputs(train, state)
        if x is None:
            return state
        from ctpipe.components.lib.models.linear_fit import logistic_fit

        y = encode_labels(train, state["label"], list(state["classes"]))
        return {**state, "linear": logistic_fit(x, y, len(state["classes"]))}

    def fit_streamed(self, stats: Any, schema: Schema) -> TaskState | None:
        """The preprocessing statistics (numeric mean/std, vocabularies, classes) and the label column; None
        with image columns (their statistics need the rows) or a table small enough for the linear path's
        closed-form start (it needs the rows): the snapshot then calls ``fit``."""
        from ctpipe.components.lib.models.linear_fit import fits

        if self.images or fits(getattr(stats, "rows", 0), len(schema.numeric)):
            return None
        return self.streamed_state(stats, schema)

    def streamed_state(self, stats: Any, schema: Schema) -> TaskState:
        """What ``fit`` and ``fit_streamed`` both hold: the statistics' part of the state."""
        return {**preprocessing_of(stats, schema.classes).to_dict(), "label": schema.label}

    def encode(self, frame: pd.DataFrame, state: TaskState) -> Batch:
        import torch

        y = encode_labels(frame, state["label"], list(state["classes"]))
        # copies: numpy views may be read-only
        return Batch(tuple(torch.tensor(a) for a in self.model_arrays(frame, state)), torch.tensor(y))

    # -- model ------------------------------------------------------------------------------------
    def build_model(self, config: Any, state: TaskState) -> nn.Module:
        from ctpipe.components.lib.models.tabular import build_model

        return build_model(config.model, self.input_spec(state))

    @staticmethod
    def input_spec(state: TaskState):
        from ctpipe.components.lib.models.tabular import InputSpec

        prep = Preprocessing.from_dict(state)
        return InputSpec(len(prep.numeric), prep.cardinalities, len(prep.classes))

    def init_model(self, model: nn.Module, state: TaskState, train_targets: torch.Tensor) -> None:
        import torch

        from ctpipe.components.lib.models.tabular import init_linear_path, init_output_bias

        if hasattr(model, "head"):
            prior = torch.bincount(train_targets, minlength=len(state["classes"])).double() / len(train_targets)
            init_output_bias(model, prior.float())
            init_linear_path(model, state.get("linear"))  # a small table's logistic fit (``fit``), if any
        zero_unknown_category_slots(model)

    # -- objective --------------------------------------------------------------------------------
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(outputs, targets)

    def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        import torch.nn.functional as F

        return F.cross_entropy(outputs.float(), targets, reduction="none")

    def row_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"accuracy": (outputs.argmax(dim=1) == targets).double()}

    # -- sanity -----------------------------------------------------------------------------------
    def init_losses(self, targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
        import torch

        from ctpipe.components.lib.models.tabular import init_output_bias

        c = len(state["classes"])
        ln_c = math.log(c)
        prior = class_prior(targets, c)
        entropy = float(-(prior[prior > 0] * prior[prior > 0].log()).sum())

        def with_prior(p: torch.Tensor):
            return lambda model: init_output_bias(model, p.float())

        def has_head(model) -> bool:
            return hasattr(model, "head")

        hint = ("; the loss at init is not what the initial output implies: check that the loss takes logits (not "
                "probabilities), that labels are class indices, and the model's output layer")
        return [
            InitLoss("init_loss_default", ln_c, DEFAULT_INIT_TOLERANCE * ln_c,
                     f"ln {c} = {ln_c:.4f} with torch's default initialisation (reported only: the trainer "
                     "initialises the head itself)", severity="warning"),
            InitLoss("init_loss_uniform", ln_c, tolerance * ln_c,
                     f"ln {c} = {ln_c:.4f} with the head bias set to a uniform prior", hint=hint,
                     initialise=with_prior(torch.full((c,), 1.0 / c)), applies=has_head),
            InitLoss("init_loss_prior", entropy, tolerance * ln_c,
                     f"the label entropy H = {entropy:.4f} with the head bias set to the class prior", hint=hint,
                     initialise=with_prior(prior), applies=has_head),
        ]

    # -- evaluation and serving -------------------------------------------------------------------
    def targets(self, frame: pd.DataFrame, state: TaskState) -> np.ndarray:
        return encode_labels(frame, state["label"], list(state["classes"]))

    def probabilities(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> np.ndarray:
        """Class probabilities for every row, preprocessed with this model's own statistics."""
        import torch

        out = [torch.softmax(torch.from_numpy(logits), dim=1).numpy() for logits in self.model_outputs(model, frame, state)]
        return np.concatenate(out) if out else np.zeros((0, len(state["classes"])), dtype=np.float32)

    def predict(self, model: nn.Module, frame: pd.DataFrame, state: TaskState, reference: TaskState) -> np.ndarray:
        probs = self.probabilities(model, frame, state).astype(np.float64)
        return align_probabilities(probs, list(state["classes"]), list(reference["classes"]))

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        from ctpipe.components.lib.metrics import compute_metrics

        return compute_metrics(targets, predictions)

    def serve(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> pd.DataFrame:
        return pd.DataFrame(self.probabilities(model, frame, state), columns=list(state["classes"]))

    def baseline(self, targets: np.ndarray, state: TaskState) -> np.ndarray | None:
        from ctpipe.components.lib.metrics import prior_probabilities

        return prior_probabilities(targets, len(state["classes"]))

    def paired_bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                         seed: int) -> dict[str, dict[str, np.ndarray]]:
        from ctpipe.components.lib.metrics import paired_bootstrap

        return paired_bootstrap(targets, models, samples=samples, seed=seed)

    def class_names(self, state: TaskState) -> list[str] | None:
        return list(state["classes"])


def make_task() -> TaskSpec:
    """The factory ``task.name: tabular_classification`` resolves to."""
    return TabularClassification().spec()
