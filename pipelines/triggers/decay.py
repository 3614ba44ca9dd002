"""Decay: the served version measured against labels that arrive late, per closed cohort, with an interval.

Drift watches the inputs; when P(y|x) moves and P(x) does not, only the truth tells. The prediction log
(``components/lib/prediction_log.py``) holds what each version served, by day; labels arrive later in their own
partitions (key and label). For the cohort of each day served within ``watch.decay.lookback_days`` whose labels
are complete (more than ``watch.decay.label_delay_days`` days ago), the champion's metric on the joined rows gets a
two-sided percentile bootstrap interval (the resampling of ``components/lib/metrics.py``), judged against the
version's registered test value of the same metric (evidence, not a point estimate): a classifier's accuracy
(``predicted_class`` logged) has decayed when its whole interval lies below the test accuracy minus
``watch.decay.max_drop``; a regressor's RMSE (``prediction`` logged) when its whole interval lies above the test
RMSE times 1 + ``watch.decay.max_rise``. Rows not joined are counted and shown, never dropped silently: predictions
without a label yet, predictions without a key, labels without a prediction, and predictions of another version
(never blamed on the champion).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.config.cluster_sections import DecayConfig
from ctpipe.components.lib.errors import UserError


@dataclass(frozen=True)
class DecayMetric:
    """A metric the check computes from logged predictions and labels: the mean of per-row values, then ``finish``."""

    name: str
    column: str  # the served column it reads
    higher_is_better: bool
    label_columns = ("label",)  # a row is labelled when these are present in its label row
    scores_documents = False  # judged on what was logged, not by scoring the late rows again

    def row_values(self, served: pd.Series, labels: pd.Series) -> np.ndarray:
        if self.name == "accuracy":
            return (served.astype(str).to_numpy() == labels.astype(str).to_numpy()).astype(np.float64)
        error = pd.to_numeric(served, errors="coerce").to_numpy(np.float64) - pd.to_numeric(labels, errors="coerce").to_numpy(np.float64)
        return error**2  # rmse: the root of the mean squared error

    def finish(self, mean: float) -> float:
        return float(np.sqrt(mean)) if self.name == "rmse" else float(mean)

    def score(self, served: pd.DataFrame, truth: pd.DataFrame, decay: DecayConfig,
              seed: int) -> tuple[float, float, float] | str:
        """The cohort's (value, low, high) from the logged predictions and their labels, or why it is not judged."""
        values = self.row_values(served[self.column], truth["label"])
        if not np.isfinite(values).all():
            return f"a label or {self.column} that is not a number: not judged"
        low, high = bootstrap_interval(values, decay.samples, decay.confidence, seed)
        return self.finish(float(values.mean())), self.finish(low), self.finish(high)


def decay_threshold(reference: float | None, higher_is_better: bool, decay: DecayConfig) -> float | None:
    """The line a cohort's whole interval must cross to have decayed: the registered test value minus
    ``max_drop`` (higher is better), or times 1 + ``max_rise`` (lower is better: relative, in the metric's units)."""
    if reference is None:
        return None
    return reference - decay.max_drop if higher_is_better else reference * (1 + decay.max_rise)


# The served column names the metric: a classifier's predicted class, a regressor's value.
METRICS = (DecayMetric("accuracy", "predicted_class", True), DecayMetric("rmse", "prediction", False))


def metric_of(predictions: pd.DataFrame) -> DecayMetric:
    """The metric the logged rows can be judged by; a log of anything else is named."""
    for metric in METRICS:
        if metric.column in predictions.columns:
            return metric
    if not len(predictions):
        return METRICS[0]
    raise UserError(
        "the prediction log's rows have none of the columns the decay check scores ("
        + ", ".join(f"{m.column}: {m.name}" for m in METRICS) + f"); found: {', '.join(map(str, predictions.columns))}")


@dataclass
class Cohort:
    """One day's predictions by the judged version, joined with their labels."""

    day: str
    closed: bool
    predictions: int
    joined: int
    unlabeled: int
    value: float | None = None  # the metric on the joined rows
    low: float | None = None
    high: float | None = None
    decayed: bool = False
    note: str = ""


@dataclass
class DecayReport:
    """What was compared, on which rows, the intervals and the decision."""

    metric: str
    version: str
    reference: float | None
    threshold: float | None
    higher_is_better: bool = True
    scored_documents: bool = False  # the late rows (a language model's documents) scored by the served version
    cohorts: list[Cohort] = field(default_factory=list)
    other_versions: dict[str, int] = field(default_factory=dict)
    without_key: int = 0
    labels_without_prediction: int = 0
    decayed: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge_decay(
    predictions: pd.DataFrame, labels: pd.DataFrame, *, version: str,
    reference: float | Mapping[str, float | None] | None, today: dt.date, decay: DecayConfig, seed: int = 0,
    metric: Any = None,
) -> DecayReport:  # fmt: skip
    """``predictions``: the prediction log's rows (``key``, ``model_version``, ``served_at``, and ``predicted_class``
    or ``prediction``: ``metric_of``); ``labels``: ``key`` and ``label``; ``reference``: the version's registered
    test value of that metric, or its registered test metrics by name. ``metric``: how a cohort is scored (None:
    ``metric_of`` the logged columns; a language model's: ``decay_scored.ScoredMetric``, its labels the documents).
    The first decayed closed cohort (oldest first) decides."""
    first_day = today - dt.timedelta(days=decay.lookback_days)
    metric = metric or metric_of(predictions)
    if isinstance(reference, Mapping):
        reference = reference.get(metric.name)
    threshold = decay_threshold(reference, metric.higher_is_better, decay)
    if not len(predictions):
        return DecayReport(metric=metric.name, version=str(version), reference=reference, threshold=threshold,
                           higher_is_better=metric.higher_is_better, scored_documents=metric.scores_documents,
                           labels_without_prediction=int(labels["key"].nunique()),
                           reason=f"no predictions logged since {first_day.isoformat()}")
    served_day = pd.to_datetime(predictions["served_at"], utc=True).dt.date
    window = predictions[(served_day >= first_day) & (served_day <= today)].assign(day=served_day)
    versions = window["model_version"].astype(str)
    ours = window[versions == str(version)]
    report = DecayReport(
        metric=metric.name, version=str(version), reference=reference, threshold=threshold,
        higher_is_better=metric.higher_is_better, scored_documents=metric.scores_documents,
        other_versions={v: int(n) for v, n in versions[versions != str(version)].value_counts().items()},
    )  # fmt: skip
    keyed = ours[ours["key"].notna()]
    report.without_key = int(len(ours) - len(keyed))
    truth = labels.dropna(subset=["key"]).drop_duplicates("key", keep="last")
    truth = truth.set_axis(truth["key"].astype(str), axis=0)
    window_keys = set(window["key"].dropna().astype(str))
    report.labels_without_prediction = int(sum(1 for k in truth.index if k not in window_keys))
    complete = truth[truth[list(metric.label_columns)].notna().all(axis=1)] if metric.label_columns else truth
    keyed = keyed.assign(labelled=keyed["key"].astype(str).isin(complete.index))
    for day, rows in keyed.groupby("day", sort=True):
        closed = (today - day).days > decay.label_delay_days
        joined = rows[rows["labelled"]]
        cohort = Cohort(day=day.isoformat(), closed=closed, predictions=len(rows), joined=len(joined),
                        unlabeled=len(rows) - len(joined))
        report.cohorts.append(cohort)
        if not closed:
            cohort.note = f"open: labels complete after {decay.label_delay_days} days"
            continue
        if len(joined) < decay.min_rows:
            cohort.note = f"{len(joined)} rows joined, fewer than watch.decay.min_rows={decay.min_rows}: not judged"
            continue
        # Seeded by the cohort's own day: its interval is the same whichever day it is judged.
        scored = metric.score(joined, complete.loc[joined["key"].astype(str)], decay, seed + day.toordinal())
        if isinstance(scored, str):
            cohort.note = scored
            continue
        cohort.value, cohort.low, cohort.high = scored
        if threshold is not None and (cohort.high < threshold if metric.higher_is_better else cohort.low > threshold):
            cohort.decayed = True
            if not report.decayed:
                report.decayed = True
                report.reason = (
                    f"{metric.name} of version {version} on the cohort of {cohort.day} ({cohort.joined} rows joined): "
                    f"{cohort.value:.3f}, interval [{cohort.low:.3f}, {cohort.high:.3f}] wholly "
                    + (f"below its test {metric.name} {reference:.3f} minus watch.decay.max_drop={decay.max_drop:g}"
                       if metric.higher_is_better else
                       f"above its test {metric.name} {reference:.3f} times 1 + watch.decay.max_rise={decay.max_rise:g}")
                )
    if not report.decayed:
        judged = [c for c in report.cohorts if c.low is not None]
        side = "below" if metric.higher_is_better else "above"
        report.reason = (
            f"no decay: {len(judged)} closed cohort(s) judged, none wholly {side} {threshold:.3f}"
            if threshold is not None else f"version {version} has no registered test {metric.name} to compare with"
        )
    return report


def bootstrap_interval(values: np.ndarray, samples: int, confidence: float, seed: int) -> tuple[float, float]:
    """The two-sided percentile bootstrap interval of the mean of ``values`` (the evaluation's resampling)."""
    from ctpipe.components.lib.metrics import resample_weights

    means = np.concatenate([w @ values / len(values) for w in resample_weights(len(values), samples, seed)])
    tail = (1 - confidence) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))


# --- reading the log and the labels ------------------------------------------------------------------------


def read_dated(uri: str, first_day: dt.date, columns: list[str] | None = None) -> pd.DataFrame:
    """Every Parquet file under ``uri``'s ``date=YYYY-MM-DD`` partitions from ``first_day`` on (hidden names
    skipped, as data readers do), concatenated; an empty frame when there is none."""
    import fsspec

    from ctpipe.pipelines.triggers.new_data import partition_date

    fs, root = fsspec.core.url_to_fs(uri)
    root = root.rstrip("/")
    frames = []
    for path in sorted(fs.find(root)):
        rel = path[len(root) :].lstrip("/")
        if not rel.endswith(".parquet") or any(part.startswith((".", "_")) for part in rel.split("/")):
            continue
        day = partition_date("/".join(rel.split("/")[:-1]))
        if day is None or day < first_day:
            continue
        with fs.open(path, "rb") as f:
            frames.append(pd.read_parquet(f, columns=columns))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns or [])


def check_decay(
    *, labels_uri: str, config: Any, version: str, reference: float | Mapping[str, float | None] | None, today: dt.date,
    tracking_uri: str | None = None,
) -> DecayReport:  # fmt: skip
    """Judge ``version`` on the prediction log (``serving.prediction_log``) joined with the labels under
    ``labels_uri`` (columns ``data.key`` and ``data.label``, in ``date=`` partitions). For a task whose targets are
    its inputs (a language model: ``decay_scored.py``) the labels are the documents (``data.key`` and the columns
    the task reads), scored by the served version from the registry at ``tracking_uri``."""
    from ctpipe.components.lib.errors import UserError
    from ctpipe.components.tasks import load_task
    from ctpipe.pipelines.triggers.decay_scored import load_served_version, scored_metric, scores_documents

    log_uri = config.serving.prediction_log
    if not log_uri:
        raise UserError("--labels needs the prediction log: set serving.prediction_log to the URI the serving "
                        "wrapper logs to (docs/monitoring.md)")
    task = load_task(config.task)
    documents = scores_documents(task)
    key, label = config.data.key, config.data.label
    if not key:
        raise UserError("--labels joins labels to predictions by the data's key: set data.key (the column both carry)")
    if not label and not documents:
        raise UserError("--labels reads the label column data.label, which is null: set data.label=COLUMN")
    decay = config.watch.decay
    first_day = today - dt.timedelta(days=decay.lookback_days)
    predictions = read_dated(log_uri, first_day)
    labels = read_dated(labels_uri, first_day)
    needed = (key,) if documents else (key, label)
    missing = [c for c in needed if c not in labels.columns]
    if len(labels) and missing:
        raise UserError(f"the labels under {labels_uri} have no column {', '.join(missing)} (data.key={key!r}"
                        + ("" if documents else f", data.label={label!r}")
                        + f"); found: {', '.join(map(str, labels.columns))}")
    metric = None
    if documents:  # the labels are the documents: every column kept for the task to read
        labels = labels.rename(columns={key: "key"}) if len(labels) else pd.DataFrame(columns=["key"])
        if tracking_uri is None:
            raise ValueError("check_decay of a task that scores documents needs the registry's tracking_uri")
        metric = scored_metric(task, reference if isinstance(reference, Mapping) else {}, version=version,
                               load=lambda: load_served_version(tracking_uri, config.registry, version, task.name))
    else:
        labels = labels.rename(columns={key: "key", label: "label"})[["key", "label"]] if len(labels) else \
            pd.DataFrame(columns=["key", "label"])
    if not len(predictions):
        predictions = pd.DataFrame(columns=["key", "model_version", "served_at", "predicted_class"])
    return judge_decay(predictions, labels, version=version, reference=reference, today=today, decay=decay,
                       metric=metric)


def registered_metrics(tracking_uri: str, config: Any, version: str) -> dict[str, float | None]:
    """The version's registered test metrics (its lineage's ``metrics``: a language model's ``loss`` too), with None
    for each of ``METRICS`` it has not."""
    from ctpipe.components.lib.registry.versions import RegisteredModel
    from ctpipe.components.lib.tracking.lineage import LineageError

    registry = RegisteredModel(tracking_uri, config.registry)
    try:
        metrics = registry.lineage(registry.get_version(version)).get("metrics") or {}
    except LineageError:
        metrics = {}
    found = {str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    return {m.name: None for m in METRICS} | found


def watch_decay(*, labels_uri: str, config: Any, tracking_uri: str, version: str, now: float, reports: Any) -> dict:
    """The watcher's decay check of the champion ``version``: the report as a dict, also written whole as
    ``reports/decay-<version>-<day>.json`` and its page ``.html`` beside it (``report.py``; one per version and
    day, replaced by a later check that day)."""
    from ctpipe.pipelines.triggers.report import write_decay_report

    today = dt.datetime.fromtimestamp(now, dt.UTC).date()
    reference = registered_metrics(tracking_uri, config, version)
    report = check_decay(labels_uri=labels_uri, config=config, version=version, reference=reference, today=today,
                         tracking_uri=tracking_uri)
    out = report.to_dict() | {"labels_uri": labels_uri, "prediction_log": config.serving.prediction_log,
                              "decay": asdict(config.watch.decay)}
    path = reports / f"decay-{version}-{today.isoformat()}.json"
    _, page = write_decay_report(out, path, path.with_suffix(".html"))
    return out | {"report_path": str(path), "report_html": str(page)}


def with_settings(config: Any, settings: list[str]) -> Any:
    """``config`` with ``section.field=JSON`` settings (``champion_settings``' form) applied."""
    import dataclasses
    import json

    for setting in settings:
        path, value = setting.split("=", 1)
        section, name = path.split(".", 1)
        part = dataclasses.replace(getattr(config, section), **{name: json.loads(value)})
        config = dataclasses.replace(config, **{section: part})
    return config
