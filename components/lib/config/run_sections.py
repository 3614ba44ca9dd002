"""The config sections of the run itself: its data, validation, sanity gate, task, model and training.

Each is a keyword-only dataclass owned by the step it configures and validated in ``__post_init__``
(``rules.py``), so a bad value fails before any work starts, naming the field and what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ctpipe.components.lib.config.rules import (
    MAX_ROWS,
    MAX_STEPS,
    MAX_WAIT_SECONDS,
    check,
    check_fraction,
    check_range,
)


@dataclass(kw_only=True)
class DataConfig:
    """Where the data is and what its columns mean."""

    # The label column; null for a task that needs none (``needs_label`` false: causal_lm's own defaults set
    # null, so its recorded config shows no tabular label), which ignores any value given.
    label: str | None = "label"
    # Column whose value keys a row's split; None hashes the row's content instead.
    key: str | None = None
    # The text column of a text task (causal_lm); None: the task's default (``text``).
    text_column: str | None = None
    # Feature columns; empty means every column but label, key and partition columns.
    features: list[str] = field(default_factory=list)
    # Features to treat as categorical; empty infers from dtype (strings, booleans, categories).
    categorical: list[str] = field(default_factory=list)
    format: Literal["auto", "parquet", "csv"] = "auto"
    # Fractions of rows assigned to train / val / test by the stable hash.
    val_fraction: float = 0.1
    test_fraction: float = 0.1
    # Salt of the split hash: changing it reshuffles every split, so it is part of the fingerprint.
    split_salt: str = "ctpipe-v1"
    # The training window (data/window.py): train on the train rows of the newest window_days days of
    # partitions, at most max_train_rows of them, newest first; None (the default) trains on all of them.
    # Validation and the val/test splits always cover every partition.
    window_days: int | None = None
    max_train_rows: int | None = None

    def __post_init__(self) -> None:
        check(self.label is None or (isinstance(self.label, str) and bool(self.label.strip())), "data.label",
              f"{self.label!r} must name the label column, or be null for a task that needs none")
        check(self.window_days is None or 1 <= self.window_days <= 36_500, "data.window_days",
               f"{self.window_days!r} must be a number of days in [1, 36500], or null for all partitions")
        check(self.max_train_rows is None or 1 <= self.max_train_rows <= MAX_ROWS, "data.max_train_rows",
               f"{self.max_train_rows!r} must be in [1, {MAX_ROWS}], or null for every train row")
        check_fraction(self.val_fraction, "data.val_fraction")
        check_fraction(self.test_fraction, "data.test_fraction")
        check(
            self.val_fraction > 0 and self.test_fraction > 0 and self.val_fraction + self.test_fraction < 0.9,
            "data.val_fraction/test_fraction",
            "both must be > 0 and together leave at least 10% of rows for training",
        )
        check(self.label not in self.features, "data.features", "must not contain the label column")
        check(self.text_column is None or (isinstance(self.text_column, str) and bool(self.text_column.strip())),
              "data.text_column", f"{self.text_column!r} must name a column, or be null for the task's default")
        check(self.text_column is None or self.text_column != self.key, "data.text_column",
              f"{self.text_column!r} is also data.key; the text and the split key must be different columns")


@dataclass(kw_only=True)
class ValidationConfig:
    """Data validation: the Great Expectations suite and the checks around it."""

    # A GX 1.x suite JSON; None profiles one from the data (or uses the champion's stored suite).
    suite_path: str | None = None
    # Margin added to profiled numeric ranges, as a fraction of the observed range.
    range_margin: float = 0.1
    # Profiled max null fraction = observed + this allowance.
    null_fraction_allowance: float = 0.01
    min_rows: int = 50
    # A single feature predicting the label with at least this accuracy is flagged as leakage.
    leakage_threshold: float = 0.99
    # Use the champion's stored suite as the reference when there is one.
    use_champion_suite: bool = True
    # Share of val/test rows repeating a train row above which cross-split duplicates fail the run.
    max_duplicate_fraction: float = 0.01
    # Above this many rows validation streams the data (data/scan.py): exact counts, splits and
    # duplicates over every row, the row checks and the GX suite on a stratified sample of sample_rows.
    in_memory_rows: int = 500_000
    sample_rows: int = 200_000
    # A streaming pass prints its progress line (rows, partitions, rate, ETA) to the log this often.
    progress_seconds: float = 5.0
    # Where the validate step computes: in its own process ("local"), on Spark ("spark": pyspark, the
    # `spark` extra; local[*] here, a SparkApplication on a cluster), or "auto": Spark above spark_min_rows.
    engine: Literal["local", "spark", "auto"] = "local"
    # With engine=auto, the row count (from the Parquet footers) above which Spark computes.
    spark_min_rows: int = 50_000_000
    # The Spark master when the step starts its own session (engine spark/auto outside spark-submit).
    spark_master: str = "local[*]"
    # Spark tasks per job: each reads whole files, so at most this many (and at most one per file).
    spark_partitions: int = 64
    # The per-partition sketch store (any fsspec URL); "" keeps it beside the data: DATA/_ctpipe_sketches/
    # (a folder named with '_' is not data). Sketches of partitions that no longer exist are pruned.
    sketch_store: str = ""
    # Refuse data wider than this many columns before reading any row (a named limit, not a stall).
    max_columns: int = 2_000

    def __post_init__(self) -> None:
        check_range(self.in_memory_rows, "validation.in_memory_rows", 0, MAX_ROWS)
        check_range(self.progress_seconds, "validation.progress_seconds", 0, 3600.0)
        check_range(self.sample_rows, "validation.sample_rows", 1000, MAX_ROWS)
        # The margin widens each profiled range by this multiple of its width: more than 100x accepts anything.
        check_range(self.range_margin, "validation.range_margin", 0, 100.0)
        check_fraction(self.null_fraction_allowance, "validation.null_fraction_allowance")
        check_range(self.min_rows, "validation.min_rows", 1, MAX_ROWS)
        check_fraction(self.leakage_threshold, "validation.leakage_threshold", open_low=True)
        check_fraction(self.max_duplicate_fraction, "validation.max_duplicate_fraction")
        check_range(self.spark_min_rows, "validation.spark_min_rows", 0, MAX_ROWS)
        check_range(self.spark_partitions, "validation.spark_partitions", 1, 100_000)
        check_range(self.max_columns, "validation.max_columns", 1, 1_000_000)
        check(bool(str(self.spark_master).strip()), "validation.spark_master",
              "name a Spark master, e.g. local[*] or spark://HOST:7077")


@dataclass(kw_only=True)
class SanityConfig:
    """The gate of cheap checks that runs before expensive training."""

    enabled: bool = True
    # |loss at init - expected| must be below this fraction of ln(C); expected is ln(C) with a uniform
    # output layer and the label entropy with the prior bias (the trainer's initialisation).
    init_loss_tolerance: float = 0.05
    overfit_batch_size: int = 8
    overfit_steps: int = 300
    overfit_max_loss: float = 0.05
    # Steps of the short training used by the baseline and loss-decrease checks.
    short_train_steps: int = 60
    # Rows of the train sample and of the val sample (both stratified by label).
    sample_rows: int = 2048
    # Level of the one-sided lower confidence bounds on the per-row loss differences that the
    # loss-decrease and baseline checks are judged by (so noise neither passes nor fails them).
    confidence: float = 0.99
    # The lower bound of the train-sample loss drop, relative to the loss at init, must exceed this.
    loss_decrease_min: float = 0.0
    # The lower bound of the held-out loss gain over the baseline (the same model fed zeroed inputs),
    # relative to the baseline's loss, must exceed this; 0 asks for a gain beyond noise, however small.
    baseline_min_improvement: float = 0.0
    # The smallest useful held-out gain over that baseline (relative): when the upper bound of the gain lies
    # below it, the labels carry no useful information (shuffled, or a join that scrambles them) and the run
    # stops ("no signal", an equivalence test); at or under baseline_min_improvement it never fires.
    useful_gain_min: float = 0.0025

    def __post_init__(self) -> None:
        check(0 < self.init_loss_tolerance < 10, "sanity.init_loss_tolerance", f"{self.init_loss_tolerance!r} must be in (0, 10)")
        check_range(self.overfit_batch_size, "sanity.overfit_batch_size", 2, 16)
        # The gate must stay cheaper than training: its step counts and sample are bounded.
        check_range(self.overfit_steps, "sanity.overfit_steps", 1, 100_000)
        check_range(self.overfit_max_loss, "sanity.overfit_max_loss", 0, 100.0, low_open=True)
        check_range(self.short_train_steps, "sanity.short_train_steps", 1, 100_000)
        check_range(self.sample_rows, "sanity.sample_rows", 16, 10_000_000)
        check(0.5 < self.confidence < 1, "sanity.confidence", f"{self.confidence} must be in (0.5, 1)")
        check(-1 < self.loss_decrease_min < 1, "sanity.loss_decrease_min", f"{self.loss_decrease_min} must be in (-1, 1)")
        check(-1 < self.baseline_min_improvement < 1, "sanity.baseline_min_improvement",
               f"{self.baseline_min_improvement} must be in (-1, 1)")
        check(0 <= self.useful_gain_min < 1, "sanity.useful_gain_min",
              f"{self.useful_gain_min} must be in [0, 1) (0: no equivalence test)")


_ENTRYPOINT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(kw_only=True)
class TaskConfig:
    """Which task (the model and how it reads the data) a run trains: a built-in by name or the user's own.

    ``entrypoint`` ("package.module:factory") wins over ``name``; the factory is called with ``options``
    as keyword arguments. Both are resolved by ``components/tasks/registry.py`` in every step and in the
    trainer pods, and checked there before any work.
    """

    name: str = "tabular_classification"
    entrypoint: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(bool(re.fullmatch(r"[a-z][a-z0-9_]*", self.name or "")), "task.name",
               f"{self.name!r} must be a built-in task's name (lower case, digits and _), e.g. 'tabular_classification'")
        if self.entrypoint is not None:
            check(bool(_ENTRYPOINT.fullmatch(self.entrypoint)), "task.entrypoint",
                   f"{self.entrypoint!r} must be 'package.module:factory' (an importable module, a colon, the "
                   "name of a function in it that returns the task)")


@dataclass(kw_only=True)
class ModelConfig:
    """The network; it knows nothing of devices or parallelism."""

    # The tabular network; null for a task that builds its own (causal_lm's defaults: its recorded config then
    # shows no tabular model; the fields below are the tabular models' and such a task ignores them).
    kind: Literal["mlp", "transformer"] | None = "mlp"
    hidden: int = 128
    depth: int = 3
    dropout: float = 0.1
    embedding_dim: int = 8
    # MLP only: wide and deep, the head also reads the numeric inputs (a linear model plus the MLP), started at a
    # ridge / logistic fit on small tables (components/lib/models/linear_fit.py). False: the MLP alone.
    linear_path: bool = True
    # Transformer only.
    heads: int = 4

    def __post_init__(self) -> None:
        check_range(self.hidden, "model.hidden", 1, 65_536)
        check(1 <= self.depth <= 64, "model.depth", f"{self.depth} must be in [1, 64]")
        check(0.0 <= self.dropout < 1.0, "model.dropout", f"{self.dropout} must be in [0, 1)")
        check_range(self.embedding_dim, "model.embedding_dim", 1, 65_536)
        check_range(self.heads, "model.heads", 1, 1024)
        if self.kind == "transformer":
            check(self.hidden % self.heads == 0, "model.hidden", "must be divisible by model.heads")


@dataclass(kw_only=True)
class TrainConfig:
    """Distributed training: launch, optimisation, evaluation and checkpoints."""

    # local: processes on this machine (`ctpipe run`). On a cluster: trainjob (Kubeflow Trainer v2 TrainJob,
    # trainer.kubeflow.org/v1alpha1), pytorchjob (Training Operator v1), or auto (the compiled default):
    # TrainJob when the cluster serves it and kubernetes.trainjob_runtime, else PyTorchJob, found at run time.
    backend: Literal["local", "auto", "pytorchjob", "trainjob"] = "local"
    workers: int = 2
    strategy: Literal["fsdp", "ddp"] = "fsdp"
    # FSDP2 units: a model block with at least this many parameters is its own unit (sharded per block);
    # smaller consecutive blocks are grouped into units of at least this size, and a smaller rest is
    # sharded with the root. Each unit costs collectives every step, pure latency for small blocks.
    # 0 shards every block on its own.
    fsdp_unit_min_params: int = 1_000_000
    # auto: bf16 parameters with fp32 reduction on GPUs with bf16, fp32 on CPU (for the small default
    # model bf16 is slower on this CPU, 0.85x, measured); bf16 forces it anywhere, fp32 everywhere.
    mixed_precision: Literal["auto", "bf16", "fp32"] = "auto"
    max_steps: int = 600
    batch_size: int = 64  # per device
    # Train splits of at most this many rows are held whole by every rank (a DistributedSampler over
    # rows); above it each rank reads only its shard of the split's row groups (engine/shards.py).
    in_memory_rows: int = 500_000
    grad_accum_steps: int = 1
    lr: float = 3e-3
    weight_decay: float = 0.01
    warmup_steps: int = 30
    min_lr_ratio: float = 0.1
    # Clip gradient spikes, not every step: the default model's gradient norm is ~1-1.5 (median) and
    # under 2.1 (90th percentile) over a healthy run, so 3.0 fires only on outliers.
    grad_clip: float = 3.0
    eval_every: int = 100
    checkpoint_every: int = 100
    # Small tables: training also stops after this many passes over the train split (a task with one example per
    # row); warmup, eval_every and checkpoint_every shrink in proportion, so selection (early stopping on val)
    # still chooses among as many checkpoints. 600 steps are 170 passes over 450 rows: a model overfits long before.
    # The demo's 5,600 train rows take 14 passes in 600 steps: unchanged. None: max_steps alone.
    max_epochs: float | None = 15.0
    keep_best: int = 2
    seed: int = 1234
    # Minutes a rank waits for the others before the process group gives up.
    timeout_minutes: float = 5.0
    threads_per_worker: int = 1
    compile: bool = False
    activation_checkpointing: bool = False
    # Passed to the PyTorchJob/local launch as the worker's wall-clock limit.
    deadline_seconds: int = 3600

    def __post_init__(self) -> None:
        check(1 <= self.workers <= 1024, "train.workers", f"{self.workers} must be in [1, 1024]")
        check_range(self.max_steps, "train.max_steps", 1, MAX_STEPS)
        # Per device; validation also checks it against the rows each worker gets.
        check_range(self.batch_size, "train.batch_size", 1, 1_048_576)
        check_range(self.in_memory_rows, "train.in_memory_rows", 0, MAX_ROWS)
        check_range(self.grad_accum_steps, "train.grad_accum_steps", 1, 4096)
        check_range(self.fsdp_unit_min_params, "train.fsdp_unit_min_params", 0, 10**13,
                    why=" (0 makes every block its own FSDP2 unit)")
        check(0 < self.lr < 10, "train.lr", f"{self.lr} must be in (0, 10)")
        check_range(self.weight_decay, "train.weight_decay", 0, 10.0)
        check(0 <= self.warmup_steps < self.max_steps, "train.warmup_steps",
              f"{self.warmup_steps!r} must be in [0, train.max_steps) = [0, {self.max_steps})")
        check_range(self.min_lr_ratio, "train.min_lr_ratio", 0, 1.0)
        check_range(self.grad_clip, "train.grad_clip", 0, 1e6, low_open=True)
        check(self.max_epochs is None or 0 < self.max_epochs <= 1e6, "train.max_epochs",
              f"{self.max_epochs!r} must be a number of passes over the train split in (0, 1e6], or null (max_steps alone)")
        # The last step is always evaluated and checkpointed, so a longer interval just means "at the end".
        check_range(self.eval_every, "train.eval_every", 1, MAX_STEPS)
        check_range(self.checkpoint_every, "train.checkpoint_every", 1, MAX_STEPS)
        check_range(self.keep_best, "train.keep_best", 1, 1000, why=" (each is a checkpoint kept on disk)")
        # The process group's timeout is a timedelta in every rank: 1e308 minutes overflowed there.
        check_range(self.timeout_minutes, "train.timeout_minutes", 0, MAX_WAIT_SECONDS / 60, low_open=True)
        check_range(self.threads_per_worker, "train.threads_per_worker", 1, 1024)
        check_range(self.deadline_seconds, "train.deadline_seconds", 60, MAX_WAIT_SECONDS)
        check(0 <= self.seed < 2**63, "train.seed", f"{self.seed} must be in [0, 2**63) (numpy and torch take no other)")

    def for_examples(self, examples: int, world_size: int) -> TrainConfig:
        """The training these settings give ``examples`` train examples on ``world_size`` ranks: ``max_steps``, or
        ``max_epochs`` passes over them when that is fewer steps, with the warmup and the evaluation and checkpoint
        intervals scaled by the same factor (each at least one step)."""
        import math
        from dataclasses import replace

        global_batch = self.batch_size * world_size * self.grad_accum_steps
        if self.max_epochs is None or examples <= 0:
            return self
        steps = max(1, math.ceil(self.max_epochs * examples / global_batch))
        if steps >= self.max_steps:
            return self
        scale = steps / self.max_steps
        return replace(self, max_steps=steps, warmup_steps=min(int(self.warmup_steps * scale), steps - 1),
                       eval_every=max(1, round(self.eval_every * scale)),
                       checkpoint_every=max(1, round(self.checkpoint_every * scale)))
