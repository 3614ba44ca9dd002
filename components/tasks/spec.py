"""A task as a spec of a few typed parts: what ctpipe trains, one part per consumer (torchtitan's ``ModelSpec``).

    spec = TaskSpec(name="my_task", codec=DataCodec(...), model=ModelParts(...), objective=Objective(...),
                    scoring=Scoring(...), checks=SanityChecks(...), serving=Serving(...))

| part | consumers | what it holds |
|---|---|---|
| ``codec`` | validation, the snapshot, the engine's data, evaluation | snapshot rows -> model inputs and targets |
| ``model`` | the engine, the sanity gate, selection, the pyfunc | the network, its FSDP units, its initialisation |
| ``objective`` | the engine, the sanity gate | the loss and validation's per-row figures |
| ``scoring`` | evaluation, the blessing, the model card | test metrics, predictions, the trivial baseline |
| ``checks`` | the sanity gate only (5 methods) | expected losses at init, the sample's strata, the first batch, own checks |
| ``profile`` | validation, the reference statistics, the watcher | what validation and drift see of the columns the task reads itself |
| ``serving`` | the registered pyfunc | what the served model returns for raw rows |
| ``defaults``, ``demo`` | the config resolver, ``ctpipe run``, ``ctpipe demo-data`` | the task's settings, its demo data |

Every part is a frozen dataclass of plain callables and values, validated at construction; optional
members have defaults here, so a task gives only what differs. No part knows of devices or ranks.
Shapes: ``Batch.inputs`` is a tuple of tensors, the model is called as ``model(*inputs)``; inputs, the
output and targets index independent examples along dimension 0. docs/task-protocol.md shows the parts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ctpipe.components.tasks.protocol import Batch, CheckResult, InitLoss, Metric, SanitySpec, TaskState

if TYPE_CHECKING:  # heavy imports stay out of the module's import time (the CLI imports the registry)
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn

    from ctpipe.components.lib.data.snapshot import Schema


class SpecError(ValueError):
    """A part of a task spec is malformed; the message names the part and the member."""


def _require_callables(part: object, names: Sequence[str]) -> None:
    for name in names:
        value = getattr(part, name)
        if value is not None and not callable(value):
            raise SpecError(f"{type(part).__name__}.{name} must be callable, got {type(value).__name__}")


# -- defaults of the optional members ----------------------------------------------------------------------


def _no_columns(schema: Any) -> list[str]:
    return []


def _no_expectations(schema: Any) -> list[dict[str, Any]]:
    return []


def _empty_frame(frame: pd.DataFrame, schema: Any) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(index=frame.index)


def _no_histograms(frame: pd.DataFrame, schema: Any) -> dict[str, pd.DataFrame]:
    return {}


def _no_fit_streamed(stats: Any, schema: Any) -> None:
    return None


def _any_columns(state: TaskState) -> None:
    return None


def _no_init(model: nn.Module, state: TaskState, train_targets: torch.Tensor) -> None:
    return None


def _label_strata(frame: pd.DataFrame, schema: Any) -> pd.Series | None:
    return frame[schema.label] if getattr(schema, "label", None) in frame.columns else None


def _generic_batch(batch: Batch, raw: pd.DataFrame, state: TaskState, schema: Any) -> dict[str, Any]:
    return {
        "model_input": f"model(*inputs) with {len(batch.inputs)} input tensor(s)",
        "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in batch.inputs],
        "targets": {"shape": list(batch.targets.shape), "dtype": str(batch.targets.dtype),
                    "values": batch.targets.flatten()[:64].tolist()},
        "rows": [],
    }


def _no_mismatches(dump: dict[str, Any], raw: pd.DataFrame, schema: Any) -> list[str]:
    return []


def _no_extra_checks(factory: Callable[[], Any], batch: Batch, state: TaskState) -> list[CheckResult]:
    return []


def _no_unit_sums(targets: np.ndarray, predictions: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {}


def _no_class_names(state: TaskState) -> None:
    return None


# -- the parts -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DataCodec:
    """Snapshot rows (a pandas frame, any batch of them) -> model inputs and targets, fitted on train only.

    ``fit(train, schema)``: the task's state (plain JSON values: vocabularies, normalisation, classes), stored
    in the snapshot and every export. ``encode(frame, state)``: a ``Batch``. ``targets(frame, state)``: the
    rows' targets as ``Scoring.compute_metrics`` takes them (first axis: rows). ``fit_streamed(stats,
    schema)``: ``fit``'s result from the train split's streamed statistics, or None when it needs the rows.
    ``target_columns(state)``: the columns ``targets`` reads (None: any). ``rowwise``: ``encode`` of a frame
    equals the concatenation of ``encode`` of its row chunks (one example per row, no packing).
    ``needs_label``: False when targets come from the features (a text's next token). ``label_kind``:
    ``classes`` or ``continuous``, how validation profiles the label. ``key_column``: the column that
    identifies an example in this task's data (the split key when the data has it and nothing sets one).
    """

    fit: Callable[[pd.DataFrame, Schema], TaskState]
    encode: Callable[[pd.DataFrame, TaskState], Batch]
    targets: Callable[[pd.DataFrame, TaskState], np.ndarray]
    fit_streamed: Callable[[Any, Schema], TaskState | None] = _no_fit_streamed
    target_columns: Callable[[TaskState], list[str] | None] = _any_columns
    rowwise: bool = False
    needs_label: bool = True
    label_kind: Literal["classes", "continuous"] = "classes"
    key_column: str | None = None

    def __post_init__(self) -> None:
        _require_callables(self, ("fit", "encode", "targets", "fit_streamed", "target_columns"))
        for switch in ("rowwise", "needs_label"):
            if not isinstance(getattr(self, switch), bool):
                raise SpecError(f"DataCodec.{switch} must be True or False, got {getattr(self, switch)!r}")
        if self.label_kind not in ("classes", "continuous"):
            raise SpecError(f"DataCodec.label_kind must be 'classes' or 'continuous', got {self.label_kind!r}")


@dataclass(frozen=True, kw_only=True)
class ModelParts:
    """The network: ``build(config, state)`` from the current torch RNG state (it knows nothing of devices
    or ranks), ``shard_units(model)`` (what FSDP2 shards one by one, then the root), ``init(model, state,
    train_targets)`` (the trainer's initialisation before step 1), ``describe(config, state)`` (what it builds,
    as plain JSON, for the reports; None: the built model's class and size, on the meta device)."""

    build: Callable[[Any, TaskState], nn.Module]
    shard_units: Callable[[nn.Module], list[nn.Module]]
    init: Callable[[nn.Module, TaskState, torch.Tensor], None] = _no_init
    describe: Callable[[Any, TaskState], dict[str, Any]] | None = None

    def __post_init__(self) -> None:
        _require_callables(self, ("build", "shard_units", "init", "describe"))


@dataclass(frozen=True, kw_only=True)
class Objective:
    """What training minimises and validation reports: ``loss`` (the scalar mean), ``row_losses`` (each
    example's, [examples]: the gate's paired intervals, validation loss), ``row_metrics`` (per-example
    validation figures, logged as ``val_<name>``)."""

    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    row_losses: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    row_metrics: Callable[[torch.Tensor, torch.Tensor], dict[str, torch.Tensor]]

    def __post_init__(self) -> None:
        _require_callables(self, ("loss", "row_losses", "row_metrics"))


@dataclass(frozen=True, kw_only=True)
class Scoring:
    """The test split's judgement: ``metrics`` (with their direction, in report order), ``predict(model,
    frame, state, reference)`` (every row, expressed against the candidate's ``reference`` state),
    ``compute_metrics(targets, predictions)``, ``baseline(targets, state)`` (the trivial input-blind
    predictor, None: none) named ``baseline_name``, ``paired_bootstrap`` (a faster equivalent of resampling
    rows; None: rows resampled through ``compute_metrics``), ``unit_sums`` (metrics as ratios of per-row
    sums: judged by sign flips of rows), ``class_names(state)`` (class-probability predictions: the
    confusion matrix and ROC)."""

    metrics: tuple[Metric, ...]
    predict: Callable[[nn.Module, pd.DataFrame, TaskState, TaskState], np.ndarray]
    compute_metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]]
    baseline: Callable[[np.ndarray, TaskState], np.ndarray | None] | None = None
    baseline_name: str = "the prior predictor"
    paired_bootstrap: Callable[..., dict[str, dict[str, np.ndarray]]] | None = None
    unit_sums: Callable[[np.ndarray, np.ndarray], dict[str, tuple[np.ndarray, np.ndarray]]] = _no_unit_sums
    class_names: Callable[[TaskState], list[str] | None] = _no_class_names

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", tuple(self.metrics))
        if not self.metrics or not all(isinstance(m, Metric) for m in self.metrics):
            raise SpecError("Scoring.metrics must be a non-empty sequence of Metric(name, higher_is_better)")
        _require_callables(self, ("predict", "compute_metrics", "baseline", "paired_bootstrap", "unit_sums",
                                  "class_names"))

    def bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                  seed: int) -> dict[str, dict[str, np.ndarray]]:
        """Each metric of each model on the SAME ``samples`` resamples of the rows: ``draws[model][metric]``."""
        if self.paired_bootstrap is not None:
            return self.paired_bootstrap(targets, models, samples=samples, seed=seed)
        return resample_rows(self.compute_metrics, targets, models, samples=samples, seed=seed)


def trivial_predictions(scoring: Scoring, targets: np.ndarray, state: TaskState) -> np.ndarray | None:
    """The trivial input-blind predictor's predictions on these rows (``Scoring.baseline``), None without one."""
    return scoring.baseline(targets, state) if scoring.baseline is not None else None


def resample_rows(compute_metrics: Callable[[np.ndarray, np.ndarray], dict[str, float]], targets: np.ndarray,
                  models: dict[str, np.ndarray], *, samples: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """The paired bootstrap by brute force: resample rows, ``compute_metrics`` on each model's rows."""
    import numpy as np

    if len(targets) == 0 or samples <= 0:
        return {name: {} for name in models}
    rng = np.random.default_rng(seed)
    draws: dict[str, dict[str, list[float]]] = {name: {} for name in models}
    for _ in range(samples):
        rows = rng.integers(0, len(targets), len(targets))
        for name, predictions in models.items():
            for metric, value in compute_metrics(targets[rows], predictions[rows]).items():
                draws[name].setdefault(metric, []).append(value)
    return {name: {m: np.asarray(v, dtype=np.float64) for m, v in per.items()} for name, per in draws.items()}


@dataclass(frozen=True, kw_only=True)
class SanityChecks:
    """What only the sanity gate needs of a task (the rest it takes from the codec, model and objective).

    ``sanity``: the shapes (example and sequence dimensions). ``init_losses(targets, state, tolerance)``: the
    expected losses at initialisation (``tolerance`` is relative: scale it to your loss). ``strata(frame,
    schema)``: what the sample is stratified by (default the label; None: uniform). ``describe_batch`` /
    ``batch_mismatches``: the first batch as JSON and where it does not decode back to the raw rows.
    ``extra_checks(factory, batch, state)``: the task's own checks (``CheckResult`` each) on fresh seeded
    models from ``factory``."""

    init_losses: Callable[[torch.Tensor, TaskState, float], list[InitLoss]]
    sanity: SanitySpec = SanitySpec()
    strata: Callable[[pd.DataFrame, Schema], pd.Series | None] = _label_strata
    describe_batch: Callable[[Batch, pd.DataFrame, TaskState, Schema], dict[str, Any]] = _generic_batch
    batch_mismatches: Callable[[dict[str, Any], pd.DataFrame, Schema], list[str]] = _no_mismatches
    extra_checks: Callable[[Callable[[], Any], Batch, TaskState], list[CheckResult]] = _no_extra_checks

    def __post_init__(self) -> None:
        _require_callables(self, ("init_losses", "strata", "describe_batch", "batch_mismatches", "extra_checks"))
        if not isinstance(self.sanity, SanitySpec):
            raise SpecError(f"SanityChecks.sanity must be a SanitySpec, got {type(self.sanity).__name__}")
        if self.sanity.example_dim != 0:
            raise SpecError(
                f"sanity.example_dim must be 0, got {self.sanity.example_dim}: ctpipe's batches, trainer and sanity "
                "gate index examples along dimension 0; put the examples first in every input, output and target "
                "(e.g. [batch, time, ...]) and name the other dimension as sequence_dim")


@dataclass(frozen=True, kw_only=True)
class DataProfile:
    """What validation and the drift watcher see of the feature columns the task decodes itself.

    ``own_columns(schema)``: those columns (images, texts), kept out of tabular profiling. ``expectations``
    and ``check_columns``: extra Great Expectations checks and the derived columns they name.
    ``drift_columns(frame, schema)``: numeric per-row statistics the watcher judges like numeric columns.
    ``drift_histograms(frame, schema)``: per name, each row's counts over fixed bins (summed and judged as
    one distribution). ``joint_profile``: the suffixes of drift columns (``<column>__<suffix>``) that are judged
    jointly as one profile per column (a text's byte-class shares): the watcher reads them here and branches on
    no task."""

    own_columns: Callable[[Schema], list[str]] = _no_columns
    expectations: Callable[[Schema], list[dict[str, Any]]] = _no_expectations
    check_columns: Callable[[pd.DataFrame, Schema], pd.DataFrame] = _empty_frame
    drift_columns: Callable[[pd.DataFrame, Schema], pd.DataFrame] = _empty_frame
    drift_histograms: Callable[[pd.DataFrame, Schema], dict[str, pd.DataFrame]] = _no_histograms
    joint_profile: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_callables(self, ("own_columns", "expectations", "check_columns", "drift_columns",
                                  "drift_histograms"))
        object.__setattr__(self, "joint_profile", tuple(self.joint_profile))


@dataclass(frozen=True, kw_only=True)
class Serving:
    """``serve(model, frame, state)``: what the registered MLflow pyfunc returns for raw rows (one output row per
    input row)."""

    serve: Callable[[nn.Module, pd.DataFrame, TaskState], pd.DataFrame]

    def __post_init__(self) -> None:
        _require_callables(self, ("serve",))


@dataclass(frozen=True, kw_only=True)
class Demo:
    """The task's own demo data: ``write_data(out, *, days=..., drift_from_day=None) -> list`` of the written
    partitions, and the settings (``section.key=value``) that go with it, under the user's own."""

    write_data: Callable[..., list[Any]]
    settings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_callables(self, ("write_data",))
        object.__setattr__(self, "settings", tuple(self.settings))
        _check_settings(self.settings, "Demo.settings")


def _check_settings(settings: Any, where: str) -> None:
    if not isinstance(settings, tuple | list) or not all(isinstance(s, str) and "=" in s for s in settings):
        raise SpecError(f"'{where}' must be a tuple of 'section.key=value' strings (as for --set), got {settings!r}")


@dataclass(frozen=True, kw_only=True)
class TaskSpec:
    """A task: its name and its parts. ``defaults``: settings (``section.key=value``) the task brings over
    ctpipe's defaults, under the user's file and ``--set`` (e.g. the metric that selects checkpoints);
    ``demo``: its own demo data (None: the tabular demo)."""

    name: str
    codec: DataCodec
    model: ModelParts
    objective: Objective
    scoring: Scoring
    checks: SanityChecks
    serving: Serving
    profile: DataProfile = field(default_factory=DataProfile)
    defaults: tuple[str, ...] = ()
    demo: Demo | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError(f"TaskSpec.name must be a non-empty text, got {self.name!r}")
        for part, kind in (("codec", DataCodec), ("model", ModelParts), ("objective", Objective),
                           ("scoring", Scoring), ("checks", SanityChecks), ("serving", Serving),
                           ("profile", DataProfile)):
            if not isinstance(getattr(self, part), kind):
                raise SpecError(f"TaskSpec.{part} must be a {kind.__name__}, got {type(getattr(self, part)).__name__}")
        if self.demo is not None and not isinstance(self.demo, Demo):
            raise SpecError(f"TaskSpec.demo must be a Demo or None, got {type(self.demo).__name__}")
        object.__setattr__(self, "defaults", tuple(self.defaults) if isinstance(self.defaults, list) else self.defaults)
        _check_settings(self.defaults, "TaskSpec.defaults")

    def describe_model(self, config: Any, state: TaskState) -> dict[str, Any]:
        """What model this task builds for ``config`` and ``state``, as plain JSON (reports, params, card)."""
        if self.model.describe is not None:
            return self.model.describe(config, state)
        from ctpipe.components.tasks.model_description import describe_built_model

        return describe_built_model(self.name, self.model.build, config, state)
