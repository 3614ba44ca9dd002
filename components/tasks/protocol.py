"""The task protocol: everything a task (a model and how it reads the data) gives ctpipe, and nothing more.

A task turns a snapshot's rows (a pandas DataFrame, any batch of them) into model inputs and targets,
builds the model, says how it is trained, evaluated, sanity-checked, sharded and served. Every step of
the pipeline reaches the model and the data's meaning only through this protocol, so a user's own task
(``task.entrypoint: "package.module:factory"``) gets validation, the sanity gate, FSDP2 training,
checkpoint selection, blessing and registration unchanged. ``TaskBase`` holds the optional parts'
defaults; ``components/tasks/registry.py`` resolves a task from config and checks it is complete.

Shapes: ``Batch.inputs`` is a tuple of tensors, the model is called as ``model(*inputs)``; every input,
the output and the targets index independent examples along ``SanitySpec.example_dim`` (0: the batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:  # heavy imports stay out of the module's import time (the CLI imports the registry)
    import numpy as np
    import pandas as pd
    import torch
    from torch import nn

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.data.snapshot import Schema

# Statistics a task fits on the train split only (vocabularies, normalisation, classes): plain JSON
# values, stored in the snapshot (``preprocessing.json``) and in every model export.
TaskState = dict[str, Any]


@dataclass(frozen=True)
class Metric:
    """A test-split metric that ``compute_metrics`` returns, and whether higher is better."""

    name: str
    higher_is_better: bool

    @property
    def direction(self) -> Literal["max", "min"]:
        return "max" if self.higher_is_better else "min"


@dataclass
class Batch:
    """Model inputs (``model(*inputs)``) and targets for a set of examples, as ``encode`` makes them."""

    inputs: tuple[Any, ...]
    targets: Any

    def __len__(self) -> int:
        return int(self.targets.shape[0])

    def select(self, index: Any) -> Batch:
        """The examples at ``index`` (a tensor of positions along the example dimension 0)."""
        return Batch(tuple(x[index] for x in self.inputs), self.targets[index])


@dataclass(frozen=True)
class SanitySpec:
    """What the sanity gate needs to know about the model's shapes.

    ``example_dim``: the dimension of every input, output and target that indexes independent examples
    (the batch-independence checks perturb one example and watch the others); only 0 is accepted
    (``load_task`` refuses another), as batches, the trainer and the gate index examples along it. ``sequence_dim``: the
    input dimension along which the model must be causal (output at position t depends only on inputs at
    positions <= t), or None for a model with no such dimension.
    """

    example_dim: int = 0
    sequence_dim: int | None = None


@dataclass(frozen=True)
class InitLoss:
    """One expectation about the loss at initialisation: initialise the model so, expect that loss.

    ``initialise`` is applied to a freshly built model (skipped when ``applies(model)`` is false); the mean
    ``loss`` on the sanity sample must lie within ``tolerance`` (absolute) of ``expected``. ``what`` says where the expected value comes from
    (e.g. "ln 10 = 2.3026 with a uniform output layer").
    """

    name: str
    expected: float
    tolerance: float
    what: str
    # What to check when it fails (appended to the report's text).
    hint: str = ""
    initialise: Callable[[Any], None] = field(default=lambda model: None)
    severity: Literal["error", "warning"] = "error"
    # Whether the expectation holds for this model at all (e.g. only a model with a ``head`` layer).
    applies: Callable[[Any], bool] = field(default=lambda model: True)


@dataclass
class CheckResult:
    """One sanity check's verdict with the figure it measured and the threshold it was held to (what the gate's
    own checks and a task's ``extra_checks`` return)."""

    name: str
    passed: bool
    value: float | None
    threshold: str
    message: str
    # error: fails the run; warning: reported only.
    severity: str = "error"
    seconds: float = 0.0


@runtime_checkable
class Task(Protocol):
    """The required parts of a task. See ``TaskBase`` for the optional ones and their defaults."""

    name: str
    # Test-split metrics (``compute_metrics``'s keys) with their direction, in the order reports show them.
    metrics: Sequence[Metric]
    sanity: SanitySpec

    # -- data: snapshot rows -> model inputs and targets ------------------------------------------
    def fit(self, train: pd.DataFrame, schema: Schema) -> TaskState:
        """Statistics from the train split only (JSON values): what ``encode`` needs besides the rows."""

    def encode(self, frame: pd.DataFrame, state: TaskState) -> Batch:
        """Any batch of snapshot rows as model inputs and targets (a streaming reader feeds it chunks)."""

    # -- model ------------------------------------------------------------------------------------
    def build_model(self, config: Config, state: TaskState) -> nn.Module:
        """A fresh model from the current torch RNG state; it knows nothing of devices or ranks."""

    def shard_units(self, model: nn.Module) -> list[nn.Module]:
        """The submodules FSDP2 shards one by one (``fully_shard`` each, then the root)."""

    # -- objective --------------------------------------------------------------------------------
    def loss(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The scalar (mean) loss the trainer minimises."""

    def row_losses(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Each example's loss, shape [examples] (the sanity gate's paired intervals; validation loss)."""

    def row_metrics(self, outputs: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-example validation metrics ([examples] each); their means are logged as ``val_<name>``."""

    # -- sanity gate ------------------------------------------------------------------------------
    def init_losses(self, targets: torch.Tensor, state: TaskState, tolerance: float) -> list[InitLoss]:
        """Expected losses at initialisation on a sample with these ``targets`` (``sanity.init_loss_tolerance``
        is relative; scale it to your loss, e.g. ``tolerance * ln C``)."""

    # -- evaluation and the registry's pyfunc -----------------------------------------------------
    def targets(self, frame: pd.DataFrame, state: TaskState) -> np.ndarray:
        """The rows' targets as ``compute_metrics`` takes them (first axis: rows)."""

    def predict(self, model: nn.Module, frame: pd.DataFrame, state: TaskState,
                reference: TaskState) -> np.ndarray:
        """Predictions for every row (first axis: rows) by ``model`` (fitted with ``state``), expressed
        against ``reference`` (the candidate's state), so a champion and a candidate score the same targets."""

    def compute_metrics(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        """Every metric in ``metrics`` from row-aligned targets and predictions (bootstrap resamples rows)."""

    def serve(self, model: nn.Module, frame: pd.DataFrame, state: TaskState) -> pd.DataFrame:
        """What the registered MLflow pyfunc returns for raw rows (one output row per input row)."""


REQUIRED_PARTS: tuple[str, ...] = (
    "name", "metrics", "sanity", "fit", "encode", "build_model", "shard_units", "loss", "row_losses",
    "row_metrics", "init_losses", "targets", "predict", "compute_metrics", "serve",
)


class TaskBase:
    """Defaults for the optional parts of a task; subclass it (or define the same methods yourself).

    Optional parts: ``init_model`` (the trainer's initialisation after ``build_model``), ``own_columns``
    (feature columns the task reads itself, e.g. an image or a text, which the tabular profiling skips),
    ``expectations`` and ``check_columns`` (extra Great Expectations checks), ``drift_columns`` (per-row
    statistics the watcher judges for drift), ``drift_histograms`` (per-row counts over fixed bins, e.g.
    the 256 byte values of a text, that the watcher judges summed into one distribution), ``target_columns``
    (the columns ``targets`` reads), ``strata`` (the sanity sample's stratification),
    ``baseline`` (the trivial predictor behind ``evaluate.thresholds.<metric>.value=baseline``),
    ``paired_bootstrap`` (the blessing's resampled metrics; the default calls ``compute_metrics``),
    ``unit_sums`` (metrics as ratios of per-row sums, which the blessing judges by sign flips of rows),
    ``class_names`` (enables the confusion matrix and ROC for class-probability predictions) and
    ``describe_batch`` / ``batch_mismatches`` (the sanity gate's first-batch dump and its round trip) and
    ``extra_checks`` (the task's own sanity checks, e.g. causality for a sequence model),
    ``rowwise_encoding`` / ``fit_streamed`` (streamed snapshot and loading without whole-split frames),
    ``needs_label`` (False: the data has no label column, e.g. a language model's texts),
    ``config_defaults`` (settings the task brings, e.g. the metric that selects checkpoints),
    ``describe_model`` (what model the task builds, as plain JSON: the sanity report, the run's params, the
    model card), ``write_demo_data`` / ``demo_settings`` (the task's own demo data and the settings that go
    with it; None: the tabular demo), ``model_config`` / ``flops_per_token`` / ``parameter_count`` (the
    model's settings object and its analytic size, for ``benchmarks/trainer.py``'s MFU; None: unknown).
    """

    sanity: SanitySpec = SanitySpec()
    # False for a task whose targets come from the features themselves (next token of a text): then
    # ``data.label`` is not required, the schema has no label, and validation reports its label checks as
    # not applicable instead of failing on a missing label column.
    needs_label: bool = True
    # What the label is: "classes" (a class per distinct value) or "continuous" (a real number). It decides how
    # validation profiles and checks the label, before any training: a continuous-looking label given to a
    # "classes" task stops there, naming the regression task.
    label_kind: Literal["classes", "continuous"] = "classes"
    # The column that identifies an example in this task's data (causal_lm: ``doc_id``): the split key of a
    # local run whose data has it and whose config sets no data.key (the ``task key`` layer of ``components/run_config/resolve.py``).
    key_column: str | None = None
    # What ``baseline`` predicts, in words, for the blessing's reasons and the model card.
    baseline_name: str = "the prior predictor"
    # True when ``encode`` of a frame equals the concatenation of ``encode`` of its row chunks (one example
    # per row, no packing): the data loader may then encode a split record batch by record batch.
    rowwise_encoding: bool = False
    # Settings ("section.key=value", as for --set) this task brings as defaults: over ctpipe's own defaults,
    # under the user's config file and --set; e.g. the metric that selects checkpoints and the blessing
    # rules on the task's own metrics, so `task.name=...` alone gives a run that can pass.
    config_defaults: tuple[str, ...] = ()
    # The task's own demo data: ``write_demo_data(out, *, days=..., drift_from_day=None) -> list`` of the written
    # partitions (``ctpipe demo-data --task``, the local run's demo). None: the task has none of its own and the
    # tabular demo is used.
    write_demo_data: Callable[..., list[Any]] | None = None
    # Settings ("section.key=value") that go with the task's demo data (e.g. its key and text columns), under
    # the user's config file and --set.
    demo_settings: tuple[str, ...] = ()
    # The task's own model settings object (e.g. the language model's ``LMConfig``; a sequence task gives it a
    # ``seq_len``, the positions per example), or None when the model is described by ``config.model`` alone.
    model_config: Any = None

    def describe_model(self, config: Config, state: TaskState) -> dict[str, Any]:
        """What model this task builds for ``config`` and ``state``, as plain JSON values (the sanity report's
        model line, the run's ``system.model.*`` params, the model card). A ``kind`` key, when given, names it.
        The default: the model ``build_model`` returns, built on the meta device (no memory, no weights): its
        class, its parameter count and the task's options (``task.options``, the user's model settings)."""
        from ctpipe.components.tasks.model_description import describe_built_model

        return describe_built_model(self.name, self.build_model, config, state)

    def flops_per_token(self) -> float | None:
        """Training FLOPs per token of the configured model (a sequence task's MFU), or None: unknown."""
        return None

    def parameter_count(self) -> int | None:
        """Parameters of the configured model without building it, or None: unknown."""
        return None

    def fit_streamed(self, stats: Any, schema: Schema) -> TaskState | None:
        """``fit``'s result from the train split's streamed statistics (``ctpipe.components.lib.data.stream_stats.TableStats``
        of the tabular columns), or None when the task needs the rows themselves (then ``fit`` gets them)."""
        return None

    def init_model(self, model: nn.Module, state: TaskState, train_targets: torch.Tensor) -> None:
        """Initialise a built model as the trainer does before step 1 (e.g. output bias at the log prior)."""

    def own_columns(self, schema: Schema) -> list[str]:
        """Feature columns this task decodes itself (images, texts): kept out of tabular profiling."""
        return []

    def expectations(self, schema: Schema) -> list[dict[str, Any]]:
        """Extra expectations for the validation suite, as ``{"type", "kwargs", "meta"}`` dicts.

        They may name columns that ``check_columns`` derives (e.g. ``image__decodable``)."""
        return []

    def check_columns(self, frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
        """Columns derived from the rows for ``expectations`` to check (same index as ``frame``)."""
        import pandas as pd

        return pd.DataFrame(index=frame.index)

    def drift_columns(self, frame: pd.DataFrame, schema: Schema) -> pd.DataFrame:
        """Numeric per-row statistics (same index as ``frame``) that the watcher judges for drift like
        numeric columns (e.g. ``image__mean_intensity``, ``text__length``)."""
        import pandas as pd

        return pd.DataFrame(index=frame.index)

    def drift_histograms(self, frame: pd.DataFrame, schema: Schema) -> dict[str, pd.DataFrame]:
        """Per name, each row's counts over fixed bins (rows x bins, the bin labels as columns; all zero
        where the row has no value), e.g. ``text__byte_unigram``: the reference keeps their sums and the
        watcher judges the window's summed histogram against it as one distribution."""
        return {}

    def target_columns(self, state: TaskState) -> list[str] | None:
        """The columns ``targets`` reads (None: it may read any): above ``train.in_memory_rows`` each rank
        reads only these of the whole train split for ``init_model``, not whole rows."""
        return None

    def strata(self, frame: pd.DataFrame, schema: Schema) -> pd.Series | None:
        """Values the sanity sample is stratified by (the label by default; None samples uniformly)."""
        return frame[schema.label] if schema.label in frame.columns else None

    def baseline(self, targets: np.ndarray, state: TaskState) -> np.ndarray | None:
        """Predictions of the trivial input-blind predictor on these rows, or None when there is none."""
        return None

    def paired_bootstrap(self, targets: np.ndarray, models: dict[str, np.ndarray], *, samples: int,
                         seed: int) -> dict[str, dict[str, np.ndarray]]:
        """Each metric of each model's predictions on the SAME ``samples`` resamples of the rows:
        ``draws[model][metric]`` (an array of ``samples`` values). The default resamples rows and calls
        ``compute_metrics``; a task may give a faster equivalent."""
        import numpy as np

        if len(targets) == 0 or samples <= 0:
            return {name: {} for name in models}
        rng = np.random.default_rng(seed)
        draws: dict[str, dict[str, list[float]]] = {name: {} for name in models}
        for _ in range(samples):
            rows = rng.integers(0, len(targets), len(targets))
            for name, predictions in models.items():
                for metric, value in self.compute_metrics(targets[rows], predictions[rows]).items():
                    draws[name].setdefault(metric, []).append(value)
        return {name: {m: np.asarray(v, dtype=np.float64) for m, v in per.items()} for name, per in draws.items()}

    def unit_sums(self, targets: np.ndarray, predictions: np.ndarray) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Metrics that are sum(numerator) / sum(denominator) over rows, as per-row (numerator, denominator): the
        blessing judges a paired difference of such a metric by sign flips of rows, exact at few rows, wherever
        both models share the denominators (``causal_lm``: NLL over each document's tokens or bytes). Empty:
        every paired interval is the bootstrap's."""
        return {}

    def class_names(self, state: TaskState) -> list[str] | None:
        """Class names when ``predict`` returns class probabilities [rows, classes] (else None)."""
        return None

    def describe_batch(self, batch: Batch, raw: pd.DataFrame, state: TaskState, schema: Schema) -> dict[str, Any]:
        """The first batch as JSON: the exact tensors going into ``model(*inputs)``, decoded where possible."""
        return {
            "model_input": f"model(*inputs) with {len(batch.inputs)} input tensor(s)",
            "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype)} for x in batch.inputs],
            "targets": {"shape": list(batch.targets.shape), "dtype": str(batch.targets.dtype),
                        "values": batch.targets.flatten()[:64].tolist()},
            "rows": [],
        }

    def batch_mismatches(self, dump: dict[str, Any], raw: pd.DataFrame, schema: Schema) -> list[str]:
        """Where the dumped tensors do not decode back to the raw rows (empty: they round-trip)."""
        return []

    def extra_checks(self, factory: Callable[[], Any], batch: Batch, state: TaskState) -> list[CheckResult]:
        """The task's own sanity checks (``CheckResult`` each) on the encoded train sample ``batch`` with fresh
        seeded models from ``factory``; an error-severity failure stops the run."""
        return []


OPTIONAL_PARTS: tuple[str, ...] = (
    "init_model", "own_columns", "expectations", "check_columns", "drift_columns", "drift_histograms",
    "target_columns", "strata", "baseline", "paired_bootstrap", "unit_sums", "class_names", "describe_batch",
    "batch_mismatches", "extra_checks", "fit_streamed", "describe_model", "write_demo_data", "demo_settings",
    "model_config", "flops_per_token", "parameter_count", "label_kind",
    "baseline_name", "key_column",
)
