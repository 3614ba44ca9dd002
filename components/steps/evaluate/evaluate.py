"""Score the candidate and the champion on the same test split and decide the blessing.

Each model is scored with its OWN preprocessing statistics (the champion with those it was trained
with), on the current snapshot's test split, streamed a row group at a time (``scoring.py``). The blessing JSON records the champion version it was
compared against, so registration can promote by compare-and-set, and whether the task code scoring the
champion is the code it was trained with (``champion_task.py``).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.files import sha256_local
from ctpipe.components.lib.data.snapshot import load_snapshot
from ctpipe.components.lib.drift.prediction_drift import prediction_drift, prediction_reference
from ctpipe.components.lib.errors import DataValidationError
from ctpipe.components.lib.handoffs import Blessing, read_sanity, read_validation, write_blessing
from ctpipe.components.lib.metrics import confusion_matrix, roc_curve
from ctpipe.components.lib.registry.model_files import UntrustedModelError, verify_export
from ctpipe.components.steps.evaluate.blessing import Check
from ctpipe.components.steps.evaluate.card import Lineage, write_model_card
from ctpipe.components.steps.evaluate.champion_task import champion_task_code, other_task_error
from ctpipe.components.steps.evaluate.judgement import judge_candidate
from ctpipe.components.steps.evaluate.linear_baseline import fit_linear_baseline
from ctpipe.components.steps.evaluate.per_class import never_predicted, per_class
from ctpipe.components.steps.evaluate.scoring import score_batches
from ctpipe.components.tasks.export import ExportedModel, load_model_export
from ctpipe.components.tasks.outputs import check_class_predictions
from ctpipe.components.tasks.spec import trivial_predictions

MODEL_ARTIFACT_PATH = "ctpipe/model.pt"
# What the champion predicted on its own test split (registration writes it from the blessing).
PREDICTIONS_ARTIFACT_PATH = "reference/predictions.json"


@dataclass
class ChampionScore:
    """The champion as scored on the current test split, or why it could not be."""

    version: str | None
    probabilities: np.ndarray | None = None
    metrics: dict[str, float] | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    task_code: dict[str, Any] | None = None  # recorded vs scoring task code (``champion_task_code``)
    prediction_reference: dict[str, Any] | None = None  # its own test predictions, summarised


@dataclass
class EvaluationResult:
    """The blessing and everything it was decided on."""

    blessed: bool
    reasons: list[str]
    candidate_metrics: dict[str, float]
    champion_metrics: dict[str, float] | None
    champion_version: str | None
    class_names: list[str]
    confusion_matrix: list[list[int]]
    roc: dict[str, list[float]] | None
    intervals: dict[str, dict[str, float]] = field(default_factory=dict)
    differences: dict[str, dict[str, float]] | None = None
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    baseline_differences: dict[str, dict[str, float]] = field(default_factory=dict)
    slices: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    test_rows: int = 0
    prediction_drift: dict[str, Any] | None = None
    linear_name: str | None = None  # the linear baseline (``linear_baseline.py``): None when none was fitted
    linear_metrics: dict[str, float] = field(default_factory=dict)
    linear_differences: dict[str, dict[str, float]] = field(default_factory=dict)
    per_class: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    model_card: str = ""  # the card as a person opens it (``.md``; KFP's output file has no extension)

    def summary(self) -> dict[str, Any]:
        return {
            "blessed": self.blessed,
            "reasons": self.reasons,
            "candidate_metrics": self.candidate_metrics,
            "champion_metrics": self.champion_metrics,
            "champion_version": self.champion_version,
            "intervals": self.intervals,
            "differences": self.differences,
            "baseline_metrics": self.baseline_metrics,
            "baseline_differences": self.baseline_differences,
            "failed_slices": [s for s in self.slices if s.get("blocking")],
            "test_rows": self.test_rows,
            "linear_name": self.linear_name,
            "linear_metrics": self.linear_metrics,
            "linear_differences": self.linear_differences,
            "per_class": self.per_class,
            "warnings": self.warnings,
        }


# --- the step ----------------------------------------------------------------------------------


def evaluate_candidate(
    model_path: str,
    snapshot_dir: str,
    config: Config,
    *,
    tracking_uri: str,
    mlflow_run_id: str,
    blessing_path: str,
    card_path: str,
    sanity_summary_path: str = "",
) -> EvaluationResult:
    """Score candidate and champion on the snapshot's test split, decide the blessing, write JSON and card.

    ``sanity_summary_path`` is the sanity step's summary JSON; the card shows it (and the snapshot's
    ``validation.json``) beside the run's lineage tags.
    """
    started = time.time()
    ev = config.evaluate
    snapshot = load_snapshot(snapshot_dir)
    if snapshot.rows("test") == 0:
        raise DataValidationError(
            f"the test split of snapshot '{snapshot_dir}' is empty, so the candidate cannot be evaluated; "
            "add data or raise data.test_fraction"
        )
    candidate = load_model_export(model_path)
    task, reference = candidate.task, candidate.state
    classes = list(task.scoring.class_names(reference) or [])
    champion, champion_model = load_champion(tracking_uri, config)
    if champion_model is not None:
        champion.task_code = champion_task_code(champion_model, champion.version)
    linear, linear_detail = fit_linear(candidate, snapshot)
    # The split is streamed a row group at a time; only per-row targets and predictions are kept.
    scored = score_batches(snapshot.batches("test"), candidate=candidate, reference=reference,
                           champion=champion_model, champion_version=champion.version, slices=list(ev.slices),
                           schema=snapshot.schema, linear=linear.model if linear else None)
    y, p_cand = scored.targets, scored.candidate
    check_class_predictions(task, p_cand, classes)  # the confusion matrix and ROC below read them so
    if champion_model is not None:
        champion.error, champion.probabilities = scored.champion_error, scored.champion
        if champion.error:
            champion.error = other_task_error(candidate, champion_model, champion.error)
    p_champ = champion.probabilities
    split_check = scored.overlap
    if split_check is not None and not split_check.ok:
        champion.error = split_check.message  # reported and compared, but nothing is blessed against it

    cand_metrics = task.scoring.compute_metrics(y, p_cand)
    predictions = prediction_reference(p_cand, classes)
    drift = (prediction_drift(champion.prediction_reference, predictions, config.watch)
             if champion.prediction_reference and predictions else None)
    if p_champ is not None:
        champion.metrics = task.scoring.compute_metrics(y, p_champ)
    judgement = judge_candidate(y, p_cand, p_champ, config, scored.slice_columns, snapshot.schema.numeric, scorer=task.scoring,
                                baseline=trivial_predictions(task.scoring, y, reference), linear=scored.linear,
                                linear_name=linear.name if linear else "the linear baseline")
    all_checks = judgement.checks
    has_rules = bool(ev.thresholds)
    blessed = judgement.passed and champion.error is None
    reasons = _reasons(blessed, all_checks, champion, has_rules)
    cm = confusion_matrix(y, p_cand.argmax(axis=1), len(classes)).tolist() if classes else []
    classes_seen = per_class(np.asarray(cm), classes) if classes else []
    warnings = never_predicted(classes_seen)
    reasons += [f"warning: {w}" for w in warnings] + [linear.detail if linear else linear_detail]
    if has_rules and not judgement.applied:
        reasons.insert(
            0,
            "no configured rule applies: without a champion only value thresholds can bless, and none is set; "
            "add one, e.g. --set evaluate.thresholds.accuracy.value=baseline",
        )
    evidence = judgement.evidence
    slices = judgement.slices

    # Class-probability predictions (a task that names its classes) get a confusion matrix and, for two, a ROC.
    roc = roc_curve(y == 1, p_cand[:, 1]) if len(classes) == 2 else None
    result = EvaluationResult(
        blessed=blessed,
        reasons=reasons,
        candidate_metrics=cand_metrics,
        champion_metrics=champion.metrics,
        champion_version=champion.version,
        class_names=classes,
        confusion_matrix=cm,
        roc=roc,
        intervals={k: e.candidate.to_dict() for k, e in evidence.items()},
        differences={k: e.vs_champion.to_dict() for k, e in evidence.items() if e.vs_champion}
        if p_champ is not None
        else None,
        baseline_metrics={k: e.baseline for k, e in evidence.items() if e.baseline is not None},
        baseline_differences={k: e.vs_baseline.to_dict() for k, e in evidence.items() if e.vs_baseline},
        slices=slices,
        checks=[c.to_dict() for c in all_checks],
        test_rows=scored.rows,
        prediction_drift=drift,
        linear_name=linear.name if linear else None,
        linear_metrics={k: e.linear for k, e in evidence.items() if e.linear is not None},
        linear_differences={k: e.vs_linear.to_dict() for k, e in evidence.items() if e.vs_linear},
        per_class=classes_seen,
        warnings=warnings,
    )
    blessing = {
        **result.summary(),
        "slices": slices,
        "checks": result.checks,
        "class_names": classes,
        "baseline_name": task.scoring.baseline_name,
        "confusion_matrix": result.confusion_matrix,
        "thresholds": {k: vars(v) for k, v in ev.thresholds.items()},
        "higher_is_better": judgement.higher_is_better,
        "champion_error": champion.error,
        "champion_split_check": split_check.to_dict() if split_check else None,
        "model_sha256": sha256_local(model_path),
        "data_fingerprint": snapshot.fingerprint,
        "model_metadata": candidate.metadata,
        # What the task built (for the tabular task: the config's model section), as the model card shows it.
        "model_config": candidate.describe_model(),
        "task": candidate.task_record,
        "task_code": candidate.task_code,
        "champion_task_code": champion.task_code,
        "prediction_reference": predictions,
        "prediction_drift": drift,
        "mlflow_run_id": mlflow_run_id,
        "evaluated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - started, 3),
    }
    write_blessing(blessing_path, Blessing(**blessing))
    result.model_card = write_model_card(card_path, blessing=blessing, snapshot=snapshot, config=config,
                                         lineage=_lineage(tracking_uri, mlflow_run_id, config, snapshot_dir, sanity_summary_path))
    _log_to_run(tracking_uri, mlflow_run_id, config, result, blessing_path, card_path)
    return result


# --- scoring --------------------------------------------------------------------------------------


def load_champion(tracking_uri: str, config: Config) -> tuple[ChampionScore, ExportedModel | None]:
    """Find the champion and load its export; a champion that cannot be loaded says why (no model then)."""
    from ctpipe.components.lib.tracking import fetch_champion_files

    with tempfile.TemporaryDirectory(prefix="ctpipe-champion-") as tmp:
        found = fetch_champion_files(tracking_uri, config.registry, [MODEL_ARTIFACT_PATH, PREDICTIONS_ARTIFACT_PATH], tmp)
        if found is None:
            return ChampionScore(version=None), None
        path = found.files[MODEL_ARTIFACT_PATH]
        if path is None:
            return ChampionScore(
                found.version, error=f"champion version {found.version} has no '{MODEL_ARTIFACT_PATH}' on its run"
            ), None
        # The artifact store is not the registry: a file there that is not the one registered is never read.
        try:
            verify_export(Path(path), found.tags, what=f"champion version {found.version}'s '{MODEL_ARTIFACT_PATH}'",
                          require_tag=False)
        except UntrustedModelError as err:
            return ChampionScore(found.version, error=str(err)), None
        try:
            champion = load_model_export(path)
        except (DataValidationError, ValueError, KeyError, TypeError, RuntimeError) as err:
            return ChampionScore(
                found.version, error=f"champion version {found.version} cannot be loaded from its '{MODEL_ARTIFACT_PATH}': {err}"
            ), None
        except Exception as err:  # noqa: BLE001 - an old export under today's task code can fail any way
            # Never a crash: the step would fail again on every later run with this champion.
            return ChampionScore(
                found.version, error=(f"champion version {found.version} cannot be loaded from its "
                                      f"'{MODEL_ARTIFACT_PATH}': {type(err).__name__}: {err}")
            ), None
        predictions = _kept_predictions(found.files.get(PREDICTIONS_ARTIFACT_PATH))
    return ChampionScore(found.version, metadata=dict(champion.metadata), prediction_reference=predictions), champion


def fit_linear(candidate: ExportedModel, snapshot: Any) -> tuple[Any, str]:
    """The linear baseline on the candidate's encoded features (``linear_baseline.py``), or None and why not."""
    import torch

    first = next(snapshot.batches("train"), None)
    if first is None or not candidate.task.codec.rowwise:
        return fit_linear_baseline(candidate.task, candidate.state, iter(()), iter(()), ())
    candidate.model.eval()
    with torch.no_grad():
        shape = tuple(candidate.model(*candidate.task.codec.encode(first.iloc[:2], candidate.state).inputs).shape)
    return fit_linear_baseline(candidate.task, candidate.state, snapshot.batches("train"), snapshot.batches("val"),
                               shape)


# --- helpers of the step --------------------------------------------------------------------------


def _kept_predictions(path: str | None) -> dict[str, Any] | None:
    """The champion's kept test predictions; None when it has none (registered before they were kept) or the
    file is not such a summary (then prediction drift is not judged, and nothing else changes)."""
    if path is None:
        return None
    try:
        kept = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return kept if isinstance(kept, dict) and kept.get("kind") in ("classes", "values") else None


def _reasons(blessed: bool, checks: list[Check], champion: ChampionScore, has_rules: bool) -> list[str]:
    """Why: what blocked the blessing first (or every rule passed), then context."""
    reasons = []
    if not has_rules:
        reasons.append(
            "no blessing thresholds are configured, so nothing is blessed (never by accident); set at least one, "
            "e.g. --set evaluate.thresholds.accuracy.value=baseline"
        )
    if champion.error:
        reasons.append(f"{champion.error}; promote by hand with 'ctpipe models promote' if this model should replace it")
    reasons.extend(c.message for c in checks if c.passed == blessed)
    if champion.task_code and champion.task_code["note"]:
        reasons.append(champion.task_code["note"])
    if champion.version is None and has_rules:
        reasons.append("no champion yet: judged on value thresholds only (first model)")
    return reasons


def _lineage(
    tracking_uri: str, run_id: str, config: Config, snapshot_dir: str, sanity_summary_path: str
) -> Lineage:
    """Where the candidate comes from: the run's tags (set by run setup) and the validation and sanity files."""
    from ctpipe.components.lib.tracking import RetryPolicy, bounded_mlflow_http, run_tags

    with bounded_mlflow_http():
        tags = RetryPolicy.of(config.registry).call(lambda: run_tags(tracking_uri, run_id), f"read MLflow run {run_id}")
    return Lineage(mlflow_run_id=run_id, tags={k: v for k, v in tags.items() if k.startswith("ctpipe.")},
                   validation=read_validation(snapshot_dir), sanity=read_sanity(sanity_summary_path))


def _log_to_run(
    tracking_uri: str, run_id: str, config: Config, result: EvaluationResult, blessing_path: str, card_path: str
) -> None:
    """Evaluation metrics, the blessing and the card on the pipeline run's MLflow run, and a copy of the training
    results (params, metrics, reports) from the content run the cached steps logged to, when it names one."""
    from ctpipe.components.lib.tracking import RetryPolicy, adopt_training_run, log_step

    metrics = {f"test_{k}": v for k, v in result.candidate_metrics.items()}
    metrics |= {f"champion_test_{k}": v for k, v in (result.champion_metrics or {}).items()}
    if (result.prediction_drift or {}).get("comparable"):
        metrics[f"prediction_drift_{result.prediction_drift['statistic']}"] = result.prediction_drift["value"]
    log_step(tracking_uri, run_id, "evaluation", metrics=metrics,
             tags={"ctpipe.blessed": str(result.blessed).lower()},
             files={"evaluation/blessing.json": blessing_path, "evaluation/model_card.md": card_path},
             retry=RetryPolicy.of(config.registry))
    # The first step that always runs after the cached ones: a rerun served from the cache gets them too.
    adopt_training_run(tracking_uri, run_id, RetryPolicy.of(config.registry))
