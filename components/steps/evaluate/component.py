"""KFP adapter: evaluate."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Markdown, Metrics, Model, Output

from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE


@dsl.component(base_image=COMPONENT_IMAGE, install_kfp_package=False)
def evaluate(
    model: Input[Model],
    snapshot: Input[Dataset],
    sanity_summary: Input[Artifact],
    config_json: str,
    mlflow_tracking_uri: str,
    mlflow_run_id: str,
    metrics: Output[Metrics],
    classification: Output[ClassificationMetrics],
    blessing: Output[Artifact],
    model_card: Output[Markdown],
) -> NamedTuple("Evaluation", [("blessed", bool), ("champion_version", str)]):
    """Score candidate and champion on the same test split and decide the blessing."""
    from collections import namedtuple

    from ctpipe.components.lib.config import Config
    from ctpipe.components.lib.kfp_support import step_status

    with step_status("evaluate", mlflow_run=(mlflow_tracking_uri, mlflow_run_id)) as record:
        # Imported inside the step, so its record counts the import time (components/lib/kfp_support.py).
        from ctpipe.components.steps.evaluate.evaluate import evaluate_candidate
        result = evaluate_candidate(
            model.path,
            snapshot.path,
            Config.from_json(config_json),
            tracking_uri=mlflow_tracking_uri,
            mlflow_run_id=mlflow_run_id,
            blessing_path=blessing.path,
            card_path=model_card.path,
            sanity_summary_path=sanity_summary.path,
        )
        import math

        def log(name: str, value) -> None:
            # KFP's UI cannot show NaN (e.g. ROC AUC when the test split holds one class only).
            if value is not None and math.isfinite(float(value)):
                metrics.log_metric(name, float(value))

        for name, value in result.candidate_metrics.items():
            log(f"candidate_{name}", value)
        for name, value in (result.champion_metrics or {}).items():
            log(f"champion_{name}", value)
        for name, interval in result.intervals.items():
            log(f"{name}_ci_low", interval.get("low"))
            log(f"{name}_ci_high", interval.get("high"))
        metrics.log_metric("blessed", 1.0 if result.blessed else 0.0)
        classification.log_confusion_matrix(result.class_names, result.confusion_matrix)
        if result.roc is not None:
            classification.log_roc_curve(result.roc["fpr"], result.roc["tpr"], result.roc["thresholds"])
        blessing.metadata.update({"blessed": result.blessed, "reasons": result.reasons})
        record.result = {**result.summary(), "model_card": result.model_card}  # the summary prints the card
    return namedtuple("Evaluation", ["blessed", "champion_version"])(result.blessed, result.champion_version or "")
