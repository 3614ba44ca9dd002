"""The config sections of the gates after training: checkpoint selection, evaluation, registration.

Also which way a metric improves (``metric_direction``), which selection and the blessing share, and
the blessing rule of one metric (``Threshold``). Validated at construction like every section.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

from ctpipe.components.lib.config.rules import MAX_ROWS, MAX_WAIT_SECONDS, check, check_range, check_safe_name
from ctpipe.components.lib.credentials import uri_secrets

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
        check(self.metric.startswith("val_"), "select.metric", "must be a validation metric (val_*)")
        known = metric_direction(self.metric)
        if self.mode == "auto":
            check(
                known is not None,
                "select.mode",
                f"'auto' cannot tell which way '{self.metric}' improves; set select.mode=max (higher is better) "
                "or select.mode=min (lower is better)",
            )
        else:
            check(
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


# A metric's name as a task declares it (``Task.metrics``). Which metrics exist is the task's to say: the
# first step checks every rule against the run's task (``ctpipe.components.tasks.check_evaluation_metrics``).
METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(kw_only=True)
class Threshold:
    """TFX-style blessing rule for one metric, judged on paired bootstrap intervals (see README, "Gates and
    their statistics"): a value bound and/or a change bound against the champion."""

    # Which way is better; auto: the task metric's (lower for log_loss). An explicit one must agree with it.
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
        check(
            self.value is not None or self.change_abs is not None or self.change_rel is not None,
            "evaluate.thresholds.<metric>",
            "a threshold must set at least one of value, change_abs, change_rel",
        )
        check(
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
    # A first model (no champion) is not blessed when it loses clearly to a linear model (logistic or ridge
    # regression on the same encoded features, fitted on train) on a metric with a value rule: the paired interval
    # of its improvement lies wholly below -linear_margin x the linear model's value.
    beat_linear: bool = True
    linear_margin: float = 0.02
    # Absolute floors on the candidate's value, beside the rules: the worst value a model may have and be blessed
    # (a minimum for higher-is-better metrics, a maximum for lower-is-better ones), e.g. {accuracy: 0.9, rmse: 60}.
    floors: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for where, rules in (("evaluate.thresholds", self.thresholds), ("evaluate.slice_thresholds", self.slice_thresholds)):
            for name in rules:
                check(
                    bool(METRIC_NAME.fullmatch(name)),
                    f"{where}.{name}",
                    "is not a metric name (letters, digits and _); name one of the task's metrics, e.g. accuracy",
                )
        for name, floor in self.floors.items():
            check(bool(METRIC_NAME.fullmatch(name)), f"evaluate.floors.{name}",
                  "is not a metric name (letters, digits and _); name one of the task's metrics, e.g. accuracy")
            check(isinstance(floor, int | float) and not isinstance(floor, bool) and math.isfinite(floor),
                  f"evaluate.floors.{name}", f"{floor!r} must be a finite number (the worst value to bless)")
        check_range(self.linear_margin, "evaluate.linear_margin", 0, 1.0)
        check_range(self.slice_min_rows, "evaluate.slice_min_rows", 1, MAX_ROWS)
        # Each resample weighs every test row: more than 100,000 costs more than the run.
        check_range(self.bootstrap_samples, "evaluate.bootstrap_samples", 1, 100_000)
        check(0 <= self.seed < 2**63, "evaluate.seed", f"{self.seed} must be in [0, 2**63) (numpy takes no negative seed)")
        check(0.5 <= self.confidence < 1, "evaluate.confidence", f"{self.confidence!r} must be in [0.5, 1)")
        tail = self.bootstrap_samples * (1 - self.confidence) / 2
        check(
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
    # Transient MLflow failures (server down, database locked) are retried with exponential backoff starting at
    # retry_backoff_seconds and capped at retry_max_backoff_seconds, until retry_budget_seconds have passed
    # (3 minutes: a server's restart) or `retries` retries are spent, whichever comes first.
    retries: int = 50
    retry_backoff_seconds: float = 1.0
    retry_max_backoff_seconds: float = 15.0
    retry_budget_seconds: float = 180.0
    # A promotion lock older than this is considered abandoned (its holder crashed) and broken.
    lock_ttl_seconds: float = 120.0

    def __post_init__(self) -> None:
        check_safe_name(self.model_name, "registry.model_name")
        check_safe_name(self.experiment, "registry.experiment")
        for field_name in ("champion_alias", "challenger_alias"):
            alias = getattr(self, field_name)
            # MLflow's alias rules: word characters and '-'; 'latest' and 'v<N>' name versions.
            check(isinstance(alias, str) and bool(re.fullmatch(r"[A-Za-z0-9_-]{1,64}", alias))
                  and alias.lower() != "latest" and not re.fullmatch(r"[vV]\d+", alias),
                  f"registry.{field_name}", f"{alias!r} is not an MLflow alias: letters, digits, '_' and '-' "
                  "(at most 64), not 'latest' and not 'v' followed by digits (those name versions)")
        check(self.champion_alias != self.challenger_alias, "registry.challenger_alias", "must differ from champion_alias")
        check_range(self.retries, "registry.retries", 0, 1000)
        check_range(self.retry_backoff_seconds, "registry.retry_backoff_seconds", 0, MAX_WAIT_SECONDS)
        check_range(self.retry_max_backoff_seconds, "registry.retry_max_backoff_seconds", 0, MAX_WAIT_SECONDS)
        check_range(self.retry_budget_seconds, "registry.retry_budget_seconds", 0, 86400,
                    why=" (at most a day; the default 180 outlasts a server restart)")
        check(self.retry_max_backoff_seconds >= self.retry_backoff_seconds, "registry.retry_max_backoff_seconds",
              f"{self.retry_max_backoff_seconds} must be >= registry.retry_backoff_seconds ({self.retry_backoff_seconds}): "
              "the cap would silently shorten every wait")
        check_range(self.lock_ttl_seconds, "registry.lock_ttl_seconds", 0, MAX_WAIT_SECONDS, low_open=True)
        # The config is copied into MLflow tags (ctpipe.config), model exports, run summaries and argv:
        # a password in the URI would land in all of them. The message names the host, never the secret.
        found = uri_secrets(self.tracking_uri)
        check(not found, "registry.tracking_uri",
              f"the URI holds credentials ({', '.join(found)}); the config is recorded "
              "in MLflow tags, model exports and run summaries, so it must not carry secrets. Give the URI "
              "without them and set MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD (or "
              "MLFLOW_TRACKING_TOKEN; PGPASSWORD for a postgresql:// store) in the environment")
