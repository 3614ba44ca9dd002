"""The config sections: one typed dataclass per part of a run, validated at construction, and ``Config``.

Each section is a keyword-only dataclass owned by the step it configures and validated in
``__post_init__``, so a bad value fails before any work starts, naming the field and what is allowed.
``Config`` holds them all and travels between pipeline steps as JSON (``to_json`` / ``from_json``).
Building from plain values is ``coerce.py``; files and ``--set`` overrides are ``loading.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from components.config.aliases import resolve_aliases
from components.config.coerce import build_dataclass
from components.errors import ConfigError

TRIGGERS = ("manual", "schedule", "new_data", "drift", "ci")
# A Kubernetes resource quantity (the CRD's pattern for cpu/memory values).
_QUANTITY = re.compile(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
_DNS1123_LABEL = re.compile(r"^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _check(condition: bool, name: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"invalid config value for '{name}': {message}")


def _check_fraction(value: float, name: str, *, open_low: bool = False) -> None:
    ok = (0.0 < value <= 1.0) if open_low else (0.0 <= value <= 1.0)
    _check(ok, name, f"{value!r} must be a fraction in {'(0, 1]' if open_low else '[0, 1]'}")


@dataclass(kw_only=True)
class DataConfig:
    """Where the data is and what its columns mean."""

    # The label column; a task that declares it needs none (``Task.needs_label``, e.g. causal_lm) ignores it.
    label: str = "label"
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
        _check(bool(self.label), "data.label", "must name the label column")
        _check(self.window_days is None or self.window_days >= 1, "data.window_days",
               f"{self.window_days!r} must be a number of days >= 1, or null for all partitions")
        _check(self.max_train_rows is None or self.max_train_rows >= 1, "data.max_train_rows",
               f"{self.max_train_rows!r} must be >= 1, or null for every train row")
        _check_fraction(self.val_fraction, "data.val_fraction")
        _check_fraction(self.test_fraction, "data.test_fraction")
        _check(
            self.val_fraction > 0 and self.test_fraction > 0 and self.val_fraction + self.test_fraction < 0.9,
            "data.val_fraction/test_fraction",
            "both must be > 0 and together leave at least 10% of rows for training",
        )
        _check(self.label not in self.features, "data.features", "must not contain the label column")
        _check(self.text_column is None or (isinstance(self.text_column, str) and bool(self.text_column.strip())),
               "data.text_column", f"{self.text_column!r} must name a column, or be null for the task's default")
        _check(self.text_column is None or self.text_column != self.key, "data.text_column",
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

    def __post_init__(self) -> None:
        _check(self.in_memory_rows >= 0, "validation.in_memory_rows", f"{self.in_memory_rows} must be >= 0")
        _check(self.sample_rows >= 1000, "validation.sample_rows", f"{self.sample_rows} must be >= 1000")
        _check(self.range_margin >= 0, "validation.range_margin", f"{self.range_margin} must be >= 0")
        _check_fraction(self.null_fraction_allowance, "validation.null_fraction_allowance")
        _check(self.min_rows >= 1, "validation.min_rows", f"{self.min_rows} must be >= 1")
        _check_fraction(self.leakage_threshold, "validation.leakage_threshold", open_low=True)
        _check_fraction(self.max_duplicate_fraction, "validation.max_duplicate_fraction")


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
    # The lower bound of the held-out loss gain over each baseline (zeroed inputs, shuffled labels),
    # relative to the baseline's loss, must exceed this; 0 asks for a gain beyond noise, however small.
    baseline_min_improvement: float = 0.0

    def __post_init__(self) -> None:
        _check(0 < self.init_loss_tolerance < 10, "sanity.init_loss_tolerance", "must be in (0, 10)")
        _check(2 <= self.overfit_batch_size <= 16, "sanity.overfit_batch_size", "must be in [2, 16]")
        _check(self.overfit_steps >= 1, "sanity.overfit_steps", "must be >= 1")
        _check(self.overfit_max_loss > 0, "sanity.overfit_max_loss", "must be > 0")
        _check(self.short_train_steps >= 1, "sanity.short_train_steps", "must be >= 1")
        _check(self.sample_rows >= 16, "sanity.sample_rows", "must be >= 16")
        _check(0.5 < self.confidence < 1, "sanity.confidence", f"{self.confidence} must be in (0.5, 1)")
        _check(-1 < self.loss_decrease_min < 1, "sanity.loss_decrease_min", f"{self.loss_decrease_min} must be in (-1, 1)")
        _check(-1 < self.baseline_min_improvement < 1, "sanity.baseline_min_improvement",
               f"{self.baseline_min_improvement} must be in (-1, 1)")


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
        _check(bool(re.fullmatch(r"[a-z][a-z0-9_]*", self.name or "")), "task.name",
               f"{self.name!r} must be a built-in task's name (lower case, digits and _), e.g. 'tabular_classification'")
        if self.entrypoint is not None:
            _check(bool(_ENTRYPOINT.fullmatch(self.entrypoint)), "task.entrypoint",
                   f"{self.entrypoint!r} must be 'package.module:factory' (an importable module, a colon, the "
                   "name of a function in it that returns the task)")


@dataclass(kw_only=True)
class ModelConfig:
    """The network; it knows nothing of devices or parallelism."""

    kind: Literal["mlp", "transformer"] = "mlp"
    hidden: int = 128
    depth: int = 3
    dropout: float = 0.1
    embedding_dim: int = 8
    # Transformer only.
    heads: int = 4

    def __post_init__(self) -> None:
        _check(self.hidden >= 1, "model.hidden", f"{self.hidden} must be >= 1")
        _check(1 <= self.depth <= 64, "model.depth", f"{self.depth} must be in [1, 64]")
        _check(0.0 <= self.dropout < 1.0, "model.dropout", f"{self.dropout} must be in [0, 1)")
        _check(self.embedding_dim >= 1, "model.embedding_dim", "must be >= 1")
        _check(self.heads >= 1, "model.heads", "must be >= 1")
        if self.kind == "transformer":
            _check(self.hidden % self.heads == 0, "model.hidden", "must be divisible by model.heads")


@dataclass(kw_only=True)
class TrainConfig:
    """Distributed training: launch, optimisation, evaluation and checkpoints."""

    # trainjob: Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) instead of a v1 PyTorchJob.
    backend: Literal["local", "pytorchjob", "trainjob"] = "local"
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
    # rows); above it each rank reads only its shard of the split's row groups (training/shards.py).
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
        _check(1 <= self.workers <= 1024, "train.workers", f"{self.workers} must be in [1, 1024]")
        _check(self.max_steps >= 1, "train.max_steps", f"{self.max_steps} must be >= 1")
        _check(self.batch_size >= 1, "train.batch_size", f"{self.batch_size} must be >= 1")
        _check(self.in_memory_rows >= 0, "train.in_memory_rows", f"{self.in_memory_rows} must be >= 0")
        _check(self.grad_accum_steps >= 1, "train.grad_accum_steps", "must be >= 1")
        _check(
            self.fsdp_unit_min_params >= 0,
            "train.fsdp_unit_min_params",
            f"{self.fsdp_unit_min_params} must be >= 0 (0 makes every block its own FSDP2 unit)",
        )
        _check(0 < self.lr < 10, "train.lr", f"{self.lr} must be in (0, 10)")
        _check(self.weight_decay >= 0, "train.weight_decay", "must be >= 0")
        _check(0 <= self.warmup_steps < self.max_steps, "train.warmup_steps", "must be in [0, max_steps)")
        _check(0 <= self.min_lr_ratio <= 1, "train.min_lr_ratio", "must be in [0, 1]")
        _check(self.grad_clip > 0, "train.grad_clip", f"{self.grad_clip} must be > 0")
        # The last step is always evaluated and checkpointed, so a longer interval just means "at the end".
        _check(self.eval_every >= 1, "train.eval_every", f"{self.eval_every} must be >= 1")
        _check(self.checkpoint_every >= 1, "train.checkpoint_every", "must be >= 1")
        _check(self.keep_best >= 1, "train.keep_best", f"{self.keep_best} must be >= 1")
        _check(self.timeout_minutes > 0, "train.timeout_minutes", "must be > 0")
        _check(self.threads_per_worker >= 1, "train.threads_per_worker", "must be >= 1")
        _check(self.deadline_seconds >= 60, "train.deadline_seconds", "must be >= 60")


# Which way a metric improves, read from the words of its name: losses and errors are lower-is-better,
# scores higher-is-better. A name with neither needs an explicit select.mode.
_LOWER_IS_BETTER_WORDS = frozenset({"loss", "error", "perplexity", "mse", "mae", "rmse"})
_HIGHER_IS_BETTER_WORDS = frozenset({"accuracy", "f1", "auc", "precision", "recall"})


def metric_direction(metric: str) -> Literal["max", "min"] | None:
    """``min`` for a loss/error metric, ``max`` for an accuracy/F1/AUC-like one, None when unknown."""
    words = set(metric.lower().split("_"))
    if words & _LOWER_IS_BETTER_WORDS:
        return "min"
    if words & _HIGHER_IS_BETTER_WORDS:
        return "max"
    return None


@dataclass(kw_only=True)
class SelectionConfig:
    """Retrospective checkpoint selection (and the trainer's retention of the best checkpoints)."""

    metric: str = "val_accuracy"
    # auto: the metric's own direction (val_loss lower, val_accuracy higher); max/min must agree with it.
    mode: Literal["auto", "max", "min"] = "auto"

    def __post_init__(self) -> None:
        _check(self.metric.startswith("val_"), "select.metric", "must be a validation metric (val_*)")
        known = metric_direction(self.metric)
        if self.mode == "auto":
            _check(
                known is not None,
                "select.mode",
                f"'auto' cannot tell which way '{self.metric}' improves; set select.mode=max (higher is better) "
                "or select.mode=min (lower is better)",
            )
        else:
            _check(
                known in (None, self.mode),
                "select.mode",
                f"{self.mode!r} contradicts select.metric={self.metric!r}, which is better when "
                f"{'lower' if known == 'min' else 'higher'} (it would pick the worst checkpoint and delete the best); "
                f"use select.mode=auto or {known}",
            )

    @property
    def direction(self) -> Literal["max", "min"]:
        """The resolved direction: ``max`` or ``min``."""
        return self.mode if self.mode != "auto" else metric_direction(self.metric)  # type: ignore[return-value]


# Metrics the evaluation computes; roc_auc only for two classes. log_loss is lower-is-better.
# Every built-in task's test metrics (Task.metrics): classification's, then causal_lm's.
EVALUATION_METRICS = ("accuracy", "macro_f1", "log_loss", "roc_auc", "loss", "bits_per_byte")


@dataclass(kw_only=True)
class Threshold:
    """TFX-style blessing rule for one metric, judged on paired bootstrap intervals (see README, "Gates and
    their statistics"): a value bound and/or a change bound against the champion."""

    # Which way is better; auto: lower for log_loss, higher for the others.
    direction: Literal["auto", "higher", "lower"] = "auto"
    # Value threshold. "baseline": the candidate must beat the prior predictor (class frequencies of the
    # same test split) with evidence: the paired interval of its gain lies wholly above 0. A number: an
    # absolute floor (higher is better) / ceiling (lower is better) on the candidate's value.
    value: float | str | None = None
    # Change thresholds against the champion, as the allowed improvement in the better direction: absolute
    # (metric units) and relative (fraction of the champion's value); negative allows that much regression.
    # The candidate is blocked when the upper bound of the paired interval of its improvement is below it.
    change_abs: float | None = None
    change_rel: float | None = None

    def __post_init__(self) -> None:
        _check(
            self.value is not None or self.change_abs is not None or self.change_rel is not None,
            "evaluate.thresholds.<metric>",
            "a threshold must set at least one of value, change_abs, change_rel",
        )
        _check(
            not isinstance(self.value, str) or self.value == "baseline",
            "evaluate.thresholds.<metric>.value",
            f"{self.value!r} must be a number (an absolute bound) or 'baseline' (beat the prior predictor)",
        )


def _default_thresholds() -> dict[str, Threshold]:
    # Beat the trivial prior predictor with evidence, and no evidence of a regression against the champion,
    # on accuracy and on a proper scoring rule (log loss), which catches an overconfident candidate.
    return {
        "accuracy": Threshold(value="baseline", change_abs=0.0),
        "log_loss": Threshold(value="baseline", change_abs=0.0),
    }


@dataclass(kw_only=True)
class EvaluationConfig:
    """Evaluation against the champion and the blessing rules (no thresholds: nothing is blessed)."""

    thresholds: dict[str, Threshold] = field(default_factory=_default_thresholds)
    # Columns to slice the test split by (categorical: per value; numeric: per quartile bin).
    slices: list[str] = field(default_factory=list)
    # Rules per slice; empty reuses the change rules (not the value rules) of `thresholds`.
    slice_thresholds: dict[str, Threshold] = field(default_factory=dict)
    # Slices with fewer test rows are reported but never block a blessing (too noisy to judge).
    slice_min_rows: int = 100
    # Paired bootstrap resamples; each tail of the interval must hold at least 5 draws (1,000 at 95%: 25).
    bootstrap_samples: int = 1000
    # Two-sided level of every interval; a slice check uses a Bonferroni-corrected level over the slice checks.
    confidence: float = 0.95
    seed: int = 0

    def __post_init__(self) -> None:
        for where, rules in (("evaluate.thresholds", self.thresholds), ("evaluate.slice_thresholds", self.slice_thresholds)):
            for name in rules:
                _check(
                    name in EVALUATION_METRICS,
                    f"{where}.{name}",
                    f"unknown metric; allowed: {', '.join(EVALUATION_METRICS)}",
                )
        _check(self.slice_min_rows >= 1, "evaluate.slice_min_rows", "must be >= 1")
        _check(0.5 <= self.confidence < 1, "evaluate.confidence", "must be in [0.5, 1)")
        tail = self.bootstrap_samples * (1 - self.confidence) / 2
        _check(
            tail >= 5 - 1e-9,
            "evaluate.bootstrap_samples",
            f"{self.bootstrap_samples} leaves {tail:.1f} resamples in each tail of a {self.confidence:.0%} interval; "
            f"at least 5 are needed: use >= {math.ceil(10 / (1 - self.confidence) - 1e-9)} (default 1000)",
        )


@dataclass(kw_only=True)
class RegistryConfig:
    """MLflow tracking and the model registry."""

    model_name: str = "ctpipe-classifier"
    experiment: str = "ctpipe"
    # None: the SQLite database in the ctpipe home (local) or the server from the environment.
    tracking_uri: str | None = None
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"
    # Transient MLflow failures (server down, database locked) are retried this many times with
    # exponential backoff starting at retry_backoff_seconds and capped at retry_max_backoff_seconds.
    retries: int = 5
    retry_backoff_seconds: float = 1.0
    retry_max_backoff_seconds: float = 15.0
    # A promotion lock older than this is considered abandoned (its holder crashed) and broken.
    lock_ttl_seconds: float = 120.0

    def __post_init__(self) -> None:
        _check(bool(self.model_name), "registry.model_name", "must not be empty")
        _check(self.champion_alias != self.challenger_alias, "registry.challenger_alias", "must differ from champion_alias")
        _check(self.retries >= 0, "registry.retries", "must be >= 0")
        _check(self.retry_backoff_seconds >= 0, "registry.retry_backoff_seconds", "must be >= 0")
        _check(self.retry_max_backoff_seconds >= 0, "registry.retry_max_backoff_seconds", "must be >= 0")
        _check(self.lock_ttl_seconds > 0, "registry.lock_ttl_seconds", "must be > 0")


@dataclass(kw_only=True)
class KubernetesConfig:
    """Settings for running on a Kubeflow cluster (PyTorchJob and the compiled pipeline)."""

    # Namespace of the training jobs. None: the namespace the train step's pod runs in (a KFP profile's),
    # where its RBAC and the shared volume are; a value must equal it (components/kube/namespace.py).
    namespace: str | None = None
    image: str = "ghcr.io/ctpipe/ctpipe:0.1.0"
    trainer_image: str = "ghcr.io/ctpipe/ctpipe-trainer:0.1.0-cuda"
    service_account: str = "ctpipe-pipeline"
    worker_cpu: str = "4"
    worker_memory: str = "16Gi"
    worker_gpus: int = 1
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    # Secret name -> list of keys exposed as env vars of the same name.
    env_from_secrets: dict[str, list[str]] = field(default_factory=dict)
    # A PVC shared by the train step and the worker pods for data snapshots and checkpoints.
    shared_pvc: str | None = "ctpipe-shared"
    shared_mount_path: str = "/mnt/ctpipe"
    # How many times the launcher restarts the whole job (every rank together, resuming from the latest
    # complete checkpoint) after a rank fails; a failure a restart would repeat (exit 2) is not restarted.
    backoff_limit: int = 3
    ttl_seconds_after_finished: int = 3600
    # Pods the operator deletes when the job ends: Running stops the surviving ranks of a failed job at
    # once (they would wait in a collective for the dead one) and keeps the failed pods' logs.
    clean_pod_policy: Literal["None", "Running", "All"] = "Running"
    # ClusterTrainingRuntime a TrainJob (train.backend=trainjob) runs on.
    trainjob_runtime: str = "torch-distributed"
    # Secrets (type kubernetes.io/dockerconfigjson) for pulling the images from a private registry.
    image_pull_secrets: list[str] = field(default_factory=list)
    # Placement and limits of the pipeline's own step pods (node_selector/tolerations above are the
    # PyTorchJob workers'): CPU steps need not land on GPU nodes.
    step_cpu_limit: str = "2"
    step_memory_limit: str = "8Gi"
    step_node_selector: dict[str, str] = field(default_factory=dict)
    step_tolerations: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check(
            self.namespace is None or bool(_DNS1123_LABEL.match(self.namespace)),
            "kubernetes.namespace",
            f"{self.namespace!r} is not a DNS-1123 label (lower-case letters, digits and '-', at most 63); "
            "or leave it unset for the train step's own namespace",
        )
        _check(bool(self.image), "kubernetes.image", "must name an image")
        _check(bool(self.trainer_image), "kubernetes.trainer_image", "must name an image")
        _check(self.worker_gpus >= 0, "kubernetes.worker_gpus", "must be >= 0")
        _check(self.backoff_limit >= 0, "kubernetes.backoff_limit", "must be >= 0")
        _check(self.ttl_seconds_after_finished >= 0, "kubernetes.ttl_seconds_after_finished", "must be >= 0")
        _check(self.shared_mount_path.startswith("/"), "kubernetes.shared_mount_path", "must be an absolute path")
        for name in ("worker_cpu", "worker_memory", "step_cpu_limit", "step_memory_limit"):
            value = getattr(self, name)
            _check(bool(_QUANTITY.match(value)), f"kubernetes.{name}", f"{value!r} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
        for where, tolerations in (("tolerations", self.tolerations), ("step_tolerations", self.step_tolerations)):
            for tol in tolerations:
                unknown = set(tol) - {"key", "operator", "value", "effect", "tolerationSeconds"}
                _check(not unknown, f"kubernetes.{where}", f"unknown toleration field(s) {sorted(unknown)}; allowed: key, operator, value, effect, tolerationSeconds")
                _check(tol.get("operator", "Equal") in ("Equal", "Exists"), f"kubernetes.{where}", "operator must be Equal or Exists")
                _check(tol.get("effect") in (None, "", "NoSchedule", "PreferNoSchedule", "NoExecute"), f"kubernetes.{where}", "effect must be NoSchedule, PreferNoSchedule or NoExecute")


@dataclass(kw_only=True)
class WatchConfig:
    """The watcher (``ctpipe watch``): new-data and drift triggers, thresholds and cool-down."""

    # Start a run (trigger=new_data) when the data fingerprint differs from the champion's.
    new_data: bool = True
    # Start a run (trigger=drift) when the newest partitions drift from the champion's reference stats.
    drift: bool = True
    # How many of the newest partitions form the current window compared with the reference.
    window_partitions: int = 1
    # Instead, with date partitions (date=YYYY-MM-DD): every partition within this many days of the newest.
    window_days: int | None = None
    # Below this many rows in the window, drift is not judged (too noisy).
    min_rows: int = 200
    # Default thresholds: PSI (numeric and categorical), KS statistic D (numeric),
    # Cramer's V of the chi-square test (categorical); a statistic above its threshold is drift.
    psi_threshold: float = 0.2
    ks_threshold: float = 0.1
    cramers_v_threshold: float = 0.1
    # Share of a categorical column's non-null rows whose category the reference never saw.
    unseen_share_threshold: float = 0.02
    # Change of a column's null fraction (absolute, e.g. 0.02 -> 0.15 is 0.13).
    null_fraction_threshold: float = 0.1
    # Every test counts as drift only when it is also significant at this level (PSI against its
    # sampling-noise bound, KS, chi-square, the unseen share and the null fraction against "same
    # distribution"), so a small window's noise does not pass an effect-size threshold; 1 disables this.
    max_p_value: float = 0.001
    # Per-column overrides, e.g. {"monthly_spend": {"psi": 0.3, "ks": 0.15}}; 0 disables that test.
    column_thresholds: dict[str, dict[str, float]] = field(default_factory=dict)
    # A drift run needs at least this many drifted columns.
    min_drifted_columns: int = 1
    # No second drift-triggered run within this many seconds of the last one (stops flapping).
    cool_down_seconds: float = 6 * 3600.0
    # Seconds between checks when watching continuously.
    interval_seconds: float = 300.0
    # Runs the watcher may have in flight at once; 0 means no limit.
    max_running: int = 1
    # Attempts per data version: a run that ended without success for an infrastructure reason (killed,
    # lost, a rank or the node died) is started again, up to this many attempts in all; a user error
    # (bad data, a failed gate, bad config) is never retried. 1 turns retries off.
    max_attempts: int = 3
    # Wait before attempt n+1: retry_backoff_seconds * 2**(n-1), at most retry_max_backoff_seconds, so a
    # broken cluster is not hammered and a brief outage is ridden out. Recorded as next_attempt_after.
    retry_backoff_seconds: float = 60.0
    retry_max_backoff_seconds: float = 1800.0

    def __post_init__(self) -> None:
        _check(self.window_partitions >= 1, "watch.window_partitions", f"{self.window_partitions} must be >= 1")
        _check(self.window_days is None or self.window_days >= 1, "watch.window_days", "must be >= 1 or null")
        _check(self.min_rows >= 1, "watch.min_rows", f"{self.min_rows} must be >= 1")
        for name in ("psi_threshold", "ks_threshold", "cramers_v_threshold", "unseen_share_threshold",
                     "null_fraction_threshold"):
            value = getattr(self, name)
            _check(value >= 0, f"watch.{name}", f"{value} must be >= 0 (0 disables the test)")
        for name in ("unseen_share_threshold", "null_fraction_threshold"):
            _check(getattr(self, name) <= 1, f"watch.{name}", f"{getattr(self, name)} must be a fraction in [0, 1]")
        _check(0 < self.max_p_value <= 1, "watch.max_p_value", f"{self.max_p_value} must be in (0, 1]")
        allowed = ("psi", "ks", "cramers_v", "unseen_share", "null_fraction")
        for column, tests in self.column_thresholds.items():
            unknown = sorted(set(tests) - set(allowed))
            _check(not unknown, f"watch.column_thresholds.{column}", f"unknown test {unknown}; allowed: {', '.join(allowed)}")
            for test, value in tests.items():
                _check(value >= 0, f"watch.column_thresholds.{column}.{test}", f"{value} must be >= 0")
        _check(self.min_drifted_columns >= 1, "watch.min_drifted_columns", "must be >= 1")
        _check(self.cool_down_seconds >= 0, "watch.cool_down_seconds", "must be >= 0")
        _check(self.interval_seconds > 0, "watch.interval_seconds", "must be > 0")
        _check(self.max_running >= 0, "watch.max_running", "must be >= 0 (0 = no limit)")
        _check(self.max_attempts >= 1, "watch.max_attempts", f"{self.max_attempts} must be >= 1 (1 = no retries)")
        _check(self.retry_backoff_seconds >= 0, "watch.retry_backoff_seconds", f"{self.retry_backoff_seconds} must be >= 0")
        _check(
            self.retry_max_backoff_seconds >= self.retry_backoff_seconds,
            "watch.retry_max_backoff_seconds",
            f"{self.retry_max_backoff_seconds} must be >= watch.retry_backoff_seconds ({self.retry_backoff_seconds})",
        )


@dataclass(kw_only=True)
class Config:
    """Everything a run needs, by section."""

    data: DataConfig = field(default_factory=DataConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    sanity: SanityConfig = field(default_factory=SanityConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    select: SelectionConfig = field(default_factory=SelectionConfig)
    evaluate: EvaluationConfig = field(default_factory=EvaluationConfig)
    registry: RegistryConfig = field(default_factory=RegistryConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    watch: WatchConfig = field(default_factory=WatchConfig)

    def __post_init__(self) -> None:
        resolve_aliases(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        return build_dataclass(cls, values, "")

    @classmethod
    def from_json(cls, text: str) -> Config:
        return cls.from_dict(json.loads(text))
