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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from ctpipe.components.tasks import image_columns
from ctpipe.components.tasks.image_columns import Image
from ctpipe.components.tasks.protocol import Batch, InitLoss, Metric, TaskBase, TaskState
from ctpipe.components.tasks.regression import TabularRegression
from ctpipe.components.tasks.tabular import TabularClassification

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


FAMILIES: dict[str, type[TaskBase]] = {"classification": TabularClassification, "regression": TabularRegression}


def tabular_task(name: str, *, model: Callable[[Inputs], nn.Module],
                 family: Literal["classification", "regression"] = "classification",
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | str | None = None,
                 metrics: Mapping[str, TaskMetric] | None = None, images: Sequence[Image] = (),
                 **family_options: Any) -> TaskBase:
    """A complete task for tabular rows from a model factory; ``loss`` (outputs, targets -> per-example
    losses [batch]) and ``metrics`` only where the family's do not fit. ``loss`` as a name picks one of the
    family's (regression: ``"huber"``); ``family_options`` go to the family (regression: ``huber_delta``).
    ``images``: columns of fixed-size images the task reads itself (validated, drift-checked, and given to the
    model after ``x_cat``)."""
    if isinstance(loss, str):
        family_options, loss = {**family_options, "loss": loss}, None
    if family not in FAMILIES:
        raise ValueError(f"tabular_task {name!r}: family must be one of {', '.join(FAMILIES)}, got {family!r}")
    base = FAMILIES[family]
    images = tuple(images)
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
            return model(Inputs(len(prep.numeric), tuple(prep.cardinalities), outputs, tuple(i.chw for i in images)))

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

    if images:
        _add_image_columns(UserTabularTask, images)
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


def _add_image_columns(cls: type, images: tuple[Image, ...]) -> None:
    """Give a tabular family the image columns it reads itself: fitted, encoded after ``x_cat``, validated,
    drift-checked and dumped in the first batch (``components/tasks/image_columns.py``)."""
    base = cls.__mro__[1]

    def own_columns(self, schema: Any) -> list[str]:
        return [*base.own_columns(self, schema), *(i.column for i in images)]

    def fit(self, train: Any, schema: Any) -> TaskState:
        from ctpipe.components.lib.data.reference_stats import table_stats

        # Classification's fit goes through fit_streamed, which this class turns off: ask the family's own.
        streamed = base.fit_streamed is not TaskBase.fit_streamed
        tabular = base.fit_streamed(self, table_stats(train, schema), schema) if streamed else base.fit(self, train, schema)
        return {**tabular, "images": image_columns.fit_images(train, images)}

    def fit_streamed(self, stats: Any, schema: Any) -> None:
        return None  # the pixel statistics need the rows themselves: the snapshot calls fit

    def model_arrays(self, frame: Any, state: TaskState) -> tuple[np.ndarray, ...]:
        missing = [i.column for i in images if i.column not in frame.columns]
        if missing:
            from ctpipe.components.lib.errors import DataValidationError

            raise DataValidationError(f"the rows to score lack image column(s) {', '.join(missing)} that the model reads")
        return (*base.model_arrays(self, frame, state), *image_columns.image_arrays(frame, images, state["images"]))

    def check_columns(self, frame: Any, schema: Any) -> Any:
        return image_columns.check_columns(frame, images)

    def expectations(self, schema: Any) -> list[dict[str, Any]]:
        return image_columns.expectations(images)

    def drift_columns(self, frame: Any, schema: Any) -> Any:
        return image_columns.drift_columns(frame, images)

    def describe_batch(self, batch: Batch, raw: Any, state: TaskState, schema: Any) -> dict[str, Any]:
        tabular = Batch(batch.inputs[:2], batch.targets)
        dump = base.describe_batch(self, tabular, raw, state, schema)
        dump["images"] = image_columns.describe_images(batch.inputs[2:], images, state["images"])
        dump["model_input"] = (f"{dump.get('model_input', 'model(x_num, x_cat)')}, then the image(s) "
                               f"{', '.join(i.column for i in images)} [B, C, H, W]: pixels / max_value, standardised")
        dump["image_inputs"] = [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in batch.inputs[2:]]
        return dump

    def batch_mismatches(self, dump: dict[str, Any], raw: Any, schema: Any) -> list[str]:
        return [*base.batch_mismatches(self, dump, raw, schema), *image_columns.image_mismatches(dump["images"], raw, images)]

    for part in (own_columns, fit, fit_streamed, model_arrays, check_columns, expectations, drift_columns,
                 describe_batch, batch_mismatches):
        setattr(cls, part.__name__, part)
