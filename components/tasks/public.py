"""The minimal task API: what a user imports to bring a model (to be exposed as ``ctpipe.task``).

    from ctpipe.components.tasks.public import Inputs, tabular_task

    def make_task(width: int = 64):
        return tabular_task("my_churn", family="classification",
                            model=lambda inputs: MyNet(inputs.numeric, inputs.categorical, inputs.outputs, width))

The user writes the model factory; the task family their label selects (``classification``: class
probabilities, cross-entropy, accuracy/F1/log loss and the prior predictor; ``regression``: one real number,
MSE, RMSE/MAE/R² and the mean predictor) brings the encoding, batching, baseline, metrics, serving, drift and
the sanity gate's expectations. Only where those defaults do not fit: ``loss`` (per-example losses) and
``metrics`` (extra test metrics). Everything else of ``components/tasks/protocol.py`` stays optional.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ctpipe.components.tasks.protocol import InitLoss, Metric, TaskBase, TaskState
from ctpipe.components.tasks.regression import TabularRegression
from ctpipe.components.tasks.tabular import TabularClassification

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Inputs", "Metric", "TaskMetric", "tabular_task"]


@dataclass(frozen=True)
class Inputs:
    """What the model is called with and must return, for its factory to size itself.

    The model is called as ``model(x_num, x_cat)``: ``x_num`` [batch, numeric] float32 (standardised numeric
    columns, missing = 0), ``x_cat`` [batch, len(categorical)] int64 (vocabulary indices, 0 = unseen or
    missing; ``categorical[i]`` is column i's vocabulary size). It returns [batch, outputs]: class logits
    (classification) or one number per row (regression, ``outputs`` = 1)."""

    numeric: int
    categorical: tuple[int, ...]
    outputs: int


@dataclass(frozen=True)
class TaskMetric:
    """An extra test metric: ``compute(targets, predictions) -> float`` on the family's targets and
    predictions (class indices and probabilities; label values and predicted values)."""

    compute: Callable[[np.ndarray, np.ndarray], float]
    higher_is_better: bool


FAMILIES: dict[str, type[TaskBase]] = {"classification": TabularClassification, "regression": TabularRegression}


def tabular_task(name: str, *, model: Callable[[Inputs], nn.Module],
                 family: Literal["classification", "regression"] = "classification",
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | str | None = None,
                 metrics: Mapping[str, TaskMetric] | None = None, **family_options: Any) -> TaskBase:
    """A complete task for tabular rows from a model factory; ``loss`` (outputs, targets -> per-example
    losses [batch]) and ``metrics`` only where the family's do not fit. ``loss`` as a name picks one of the
    family's (regression: ``"huber"``); ``family_options`` go to the family (regression: ``huber_delta``)."""
    if isinstance(loss, str):
        family_options, loss = {**family_options, "loss": loss}, None
    if family not in FAMILIES:
        raise ValueError(f"tabular_task {name!r}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    base = FAMILIES[family]
    extra = dict(metrics or {})
    clash = sorted(set(extra) & {m.name for m in base.metrics})
    if clash:
        raise ValueError(f"tabular_task {name!r}: metric(s) {', '.join(clash)} are the family's own; name yours otherwise")

    class UserTabularTask(base):  # type: ignore[misc,valid-type]
        metrics = (*base.metrics, *(Metric(n, m.higher_is_better) for n, m in extra.items()))
        # The family's blessing rules and selection, under a registered model name of the task's own.
        config_defaults = (*(s for s in base.config_defaults if not s.startswith("registry.model_name=")),
                           f"registry.model_name=ctpipe-{name.replace('_', '-')}")

        def build_model(self, config: Any, state: TaskState) -> nn.Module:
            from ctpipe.components.lib.data.encoding import Preprocessing

            prep = Preprocessing.from_dict(state)
            outputs = len(prep.classes) if family == "classification" else 1
            return model(Inputs(len(prep.numeric), tuple(prep.cardinalities), outputs))

        def describe_model(self, config: Any, state: TaskState) -> dict[str, Any]:
            return TaskBase.describe_model(self, config, state)  # the user's network, not config.model

        def shard_units(self, net: nn.Module) -> list[nn.Module]:
            return list(getattr(net, "blocks", []))  # no blocks: FSDP shards the root as one unit

        def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
            found = super().compute_metrics(targets, predictions)
            return {**found, **{n: float(m.compute(targets, predictions)) for n, m in extra.items()}}

        def paired_bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                             seed: int) -> dict[str, dict[str, np.ndarray]]:
            # The family's fast bootstrap knows its own metrics only; with extra ones, resample row by row.
            chosen = TaskBase.paired_bootstrap if extra else base.paired_bootstrap
            return chosen(self, targets, models, samples=samples, seed=seed)

    if loss is not None:
        def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return loss(outputs, targets)

        def mean_loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return loss(outputs, targets).mean()

        def init_losses(self, targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
            # The user's loss of an all-zero output, what a model whose head is zeroed gives.
            import torch

            width = len(state["classes"]) if family == "classification" else 1
            expected = float(loss(torch.zeros(len(targets), width), targets).mean())

            def zero_head(net) -> None:
                with torch.no_grad():
                    net.head.weight.zero_()
                    net.head.bias.zero_()

            return [InitLoss("init_loss_zero_output", expected, tolerance * max(abs(expected), 1.0),
                             f"your loss of an all-zero output, {expected:.4f}", initialise=zero_head,
                             applies=lambda net: hasattr(net, "head"))]

        UserTabularTask.row_losses = row_losses
        UserTabularTask.loss = mean_loss
        UserTabularTask.init_losses = init_losses
    UserTabularTask.name = name
    UserTabularTask.__qualname__ = UserTabularTask.__name__ = f"TabularTask[{name}]"
    return UserTabularTask(**family_options)
