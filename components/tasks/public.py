"""The minimal task API: what a user imports to bring a model (to be exposed as ``ctpipe.task``).

    from ctpipe.components.tasks.public import Inputs, tabular_task

    def make_task(width: int = 64):
        return tabular_task("my_churn", family="classification",
                            model=lambda inputs: MyNet(inputs.numeric, inputs.categorical, inputs.outputs, width))

With image columns (``images=[Image("image", (8, 8), max_value=16)]``, raw bytes or arrays of a fixed size per
row) the model is called as ``model(x_num, x_cat, image)``, each image [batch, channels, height, width].

The user writes the model factory; the task family their label selects (``classification``: class
probabilities, cross-entropy, accuracy/F1/log loss and the prior predictor; ``regression``: one real number,
MSE, RMSE/MAE/R² and the mean predictor) brings the encoding, batching, baseline, metrics, serving, drift and
the sanity gate's expectations. Only where those defaults do not fit: ``loss`` (per-example losses) and
``metrics`` (extra test metrics). Everything else of ``components/tasks/protocol.py`` stays optional.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ctpipe.components.tasks.image_columns import Image
from ctpipe.components.tasks.protocol import InitLoss, Metric, TaskState
from ctpipe.components.tasks.regression import TabularRegression
from ctpipe.components.tasks.spec import Objective, TaskSpec
from ctpipe.components.tasks.tabular import TabularClassification
from ctpipe.components.tasks.tabular_common import TabularFamily

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["Image", "Inputs", "Metric", "TaskMetric", "tabular_task"]


@dataclass(frozen=True)
class Inputs:
    """What the model is called with and must return, for its factory to size itself.

    The model is called as ``model(x_num, x_cat, *images)``: ``x_num`` [batch, numeric] float32 (standardised
    numeric columns, missing = 0), ``x_cat`` [batch, len(categorical)] int64 (vocabulary indices, 0 = unseen or
    missing; ``categorical[i]`` is column i's vocabulary size), then one float32 tensor per image column
    [batch, *images[i]] (``images[i]`` = (channels, height, width); pixels / max_value, standardised with the
    train split's mean and std). It returns [batch, outputs]: class logits (classification) or one number per
    row (regression, ``outputs`` = 1)."""

    numeric: int
    categorical: tuple[int, ...]
    outputs: int
    images: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class TaskMetric:
    """An extra test metric: ``compute(targets, predictions) -> float`` on the family's targets and
    predictions (class indices and probabilities; label values and predicted values)."""

    compute: Callable[[np.ndarray, np.ndarray], float]
    higher_is_better: bool


FAMILIES: dict[str, type[TabularFamily]] = {"classification": TabularClassification, "regression": TabularRegression}


def tabular_task(name: str, *, model: Callable[[Inputs], nn.Module],
                 family: Literal["classification", "regression"] = "classification",
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | str | None = None,
                 metrics: Mapping[str, TaskMetric] | None = None, images: Sequence[Image] = (),
                 **family_options: Any) -> TaskSpec:
    """A complete task for tabular rows from a model factory; ``loss`` (outputs, targets -> per-example
    losses [batch]) and ``metrics`` only where the family's do not fit. ``loss`` as a name picks one of the
    family's (regression: ``"huber"``); ``family_options`` go to the family (regression: ``huber_delta``).
    ``images``: columns of fixed-size images the task reads itself (validated, drift-checked, and given to the
    model after ``x_cat``). The family's spec with the user's parts in place: nothing is subclassed."""
    if isinstance(loss, str):
        family_options, loss = {**family_options, "loss": loss}, None
    if family not in FAMILIES:
        raise ValueError(f"tabular_task {name!r}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    images = tuple(images)
    base = FAMILIES[family](images=images, **family_options)
    spec = base.spec()
    extra = dict(metrics or {})
    clash = sorted(set(extra) & {m.name for m in spec.scoring.metrics})
    if clash:
        raise ValueError(f"tabular_task {name!r}: metric(s) {', '.join(clash)} are the family's own; name yours otherwise")
    width_of = (lambda state: len(state["classes"])) if family == "classification" else (lambda state: 1)

    def build(config: Any, state: TaskState) -> nn.Module:
        from ctpipe.components.lib.data.encoding import Preprocessing

        prep = Preprocessing.from_dict(state)
        return model(Inputs(len(prep.numeric), tuple(prep.cardinalities), width_of(state),
                            tuple(i.chw for i in images)))

    def shard_units(net: nn.Module) -> list[nn.Module]:
        return list(getattr(net, "blocks", []))  # no blocks: FSDP shards the root as one unit

    scoring = spec.scoring
    if extra:
        def compute_metrics(targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
            found = base.compute_metrics(targets, predictions)
            return {**found, **{n: float(m.compute(targets, predictions)) for n, m in extra.items()}}

        # The family's fast bootstrap knows its own metrics only; with extra ones, rows are resampled.
        scoring = replace(scoring, compute_metrics=compute_metrics, paired_bootstrap=None,
                          metrics=(*scoring.metrics, *(Metric(n, m.higher_is_better) for n, m in extra.items())))
    objective, checks = spec.objective, spec.checks
    if loss is not None:
        objective = Objective(loss=lambda outputs, targets: loss(outputs, targets).mean(), row_losses=loss,
                              row_metrics=spec.objective.row_metrics)
        checks = replace(checks, init_losses=_zero_output_init_losses(loss, width_of))
    return replace(
        spec, name=name, scoring=scoring, objective=objective, checks=checks,
        # The user's network: described by its class and size, not the tabular config section it never reads.
        model=replace(spec.model, build=build, shard_units=shard_units, describe=None),
        # The family's blessing rules and selection, under a registered model name of the task's own.
        defaults=(*(s for s in spec.defaults if not s.startswith("registry.model_name=")),
                  f"registry.model_name=ctpipe-{name.replace('_', '-')}"),
    )


def _zero_output_init_losses(loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                             width_of: Callable[[TaskState], int]) -> Callable[..., list[InitLoss]]:
    """The user's loss of an all-zero output, what a model whose head is zeroed gives."""

    def init_losses(targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
        import torch

        expected = float(loss(torch.zeros(len(targets), width_of(state)), targets).mean())

        def zero_head(net) -> None:
            with torch.no_grad():
                net.head.weight.zero_()
                net.head.bias.zero_()

        return [InitLoss("init_loss_zero_output", expected, tolerance * max(abs(expected), 1.0),
                         f"your loss of an all-zero output, {expected:.4f}", initialise=zero_head,
                         applies=lambda net: hasattr(net, "head"))]

    return init_losses
