"""Decay of a task whose targets are its own inputs (a language model): the late documents scored by the served version.

A classifier's log holds what it served and the truth arrives later as a label; a language model serves a
score and a continuation of a text, and its truth is the document itself: the late "label" of a logged request is
the document (its key and text, in the labels' ``date=`` partitions). The check loads the served version from the
registry (its export ``ctpipe/model.pt``, refused unless its SHA-256 is the version's ``ctpipe.model_sha256``, before
the file is read) and scores each closed cohort's documents with the task's own parts, as evaluation scores the
test split: ``task.scoring.predict`` (per document), ``compute_metrics`` and ``bootstrap`` (for ``causal_lm`` a
resampling of documents: each metric a ratio of re-weighted per-document sums). The metric is the task's first
with a registered test value (``causal_lm``: ``loss``, nats per token), judged as ``decay.py`` judges any.
Nothing here names a task: any task whose codec needs no label column (``codec.needs_label`` False) is judged so.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ctpipe.components.lib.config.cluster_sections import DecayConfig
from ctpipe.components.lib.errors import DataValidationError, UserError

# Where registration logs the evaluated export (its SHA-256 is the version's EXPORT_DIGEST_TAG).
EXPORT_FILE = "ctpipe/model.pt"


def scores_documents(task: Any) -> bool:
    """Whether the decay check scores the late rows with the served model (the task's targets come from its inputs,
    so the rows themselves are the truth) rather than comparing logged predictions with a label column."""
    return not task.codec.needs_label


@dataclass
class ScoredMetric:
    """A task's metric on a cohort's late documents, scored by the served version (loaded once, when first needed)."""

    name: str
    higher_is_better: bool
    load: Callable[[], Any]  # -> the served version's ExportedModel
    version: str = ""
    label_columns: tuple[str, ...] = ()  # a document is labelled by its key's row being there
    scores_documents: bool = True
    _model: Any = field(default=None, repr=False)

    def score(self, served: pd.DataFrame, truth: pd.DataFrame, decay: DecayConfig,
              seed: int) -> tuple[float, float, float] | str:
        """(value, low, high) of the metric on the cohort's documents ``truth``, by the task's own bootstrap."""
        if self._model is None:
            self._model = self.load()
        export, documents = self._model, truth.reset_index(drop=True)
        scoring = export.task.scoring
        try:
            targets = export.task.codec.targets(documents, export.state)
            rows = scoring.predict(export.model, documents, export.state, export.state)
        except DataValidationError as err:
            raise UserError(f"the labels' documents cannot be scored by version {self.version}'s task '{export.task.name}': {err}") from err
        value = scoring.compute_metrics(targets, rows).get(self.name)
        draws = scoring.bootstrap(targets, {"served": rows}, samples=decay.samples, seed=seed)["served"].get(self.name)
        if value is None or draws is None or not np.isfinite(value) or not np.isfinite(draws).all():
            return f"{self.name} is not a finite number on these documents: not judged"
        tail = (1 - decay.confidence) / 2
        return float(value), float(np.quantile(draws, tail)), float(np.quantile(draws, 1 - tail))


def scored_metric(task: Any, reference: Mapping[str, float | None], load: Callable[[], Any],
                  version: str) -> ScoredMetric:
    """The task's first metric with a registered test value (else its first), scored with the served version."""
    metrics = list(task.scoring.metrics)
    chosen = next((m for m in metrics if reference.get(m.name) is not None), metrics[0])
    return ScoredMetric(chosen.name, chosen.higher_is_better, load, str(version))


def load_served_version(tracking_uri: str, registry: Any, version: str, task_name: str) -> Any:
    """The version's export, after its file's SHA-256 matches the version's ``ctpipe.model_sha256`` (a file
    changed in the artifact store after registration is never read, and no task code is imported for it)."""
    from ctpipe.components.lib.registry.model_files import verify_export
    from ctpipe.components.lib.registry.versions import RegisteredModel
    from ctpipe.components.lib.tracking.store import download_version_file
    from ctpipe.components.tasks.export import load_model_export

    registered = RegisteredModel(tracking_uri, registry)
    model_version = registered.get_version(version)
    with tempfile.TemporaryDirectory(prefix="ctpipe-decay-") as tmp:
        local = download_version_file(tracking_uri, model_version, EXPORT_FILE, tmp)
        if local is None:
            raise UserError(f"version {version} of '{registry.model_name}': its run has no {EXPORT_FILE} to score "
                            "the labels' documents with")
        # Required here: a version without the tag is not loaded to score the labels' documents.
        verify_export(Path(local), model_version.tags, what=f"version {version} of '{registry.model_name}': {EXPORT_FILE}",
                      require_tag=True)
        export = load_model_export(Path(local))
    if export.task.name != task_name:
        raise UserError(f"version {version} is a model of task '{export.task.name}', the watcher's config one of "
                        f"'{task_name}': set task.name to the served model's task")
    return export
