"""Drift of the predictions (components/lib/drift/prediction_drift.py): the candidate's predictions on the new
test split against the champion's on its own, decided on an effect above its threshold AND a p-value under
"same distribution", so a small sample's noise is not drift however far its point estimate lies."""

from __future__ import annotations

import numpy as np
import pytest

from ctpipe.components.lib.config import WatchConfig
from ctpipe.components.lib.drift.prediction_drift import describe, prediction_drift, prediction_reference

CLASSES = ["a", "b", "c"]


def probabilities(rng, n: int, shares: list[float]) -> np.ndarray:
    """Class probabilities whose argmax follows ``shares``."""
    chosen = rng.choice(len(shares), n, p=shares)
    out = rng.uniform(0, 0.3, (n, len(shares)))
    out[np.arange(n), chosen] = 0.9
    return out / out.sum(axis=1, keepdims=True)


def test_the_predicted_class_distribution_drifts_only_beyond_its_noise_bound():
    rng = np.random.default_rng(0)
    reference = prediction_reference(probabilities(rng, 4000, [0.5, 0.3, 0.2]), CLASSES)
    assert reference["kind"] == "classes" and sum(reference["counts"].values()) == 4000
    same = prediction_drift(reference, prediction_reference(probabilities(rng, 3000, [0.5, 0.3, 0.2]), CLASSES),
                            WatchConfig())
    assert same["comparable"] and not same["drifted"] and same["statistic"] == "cramers_v"
    moved = prediction_drift(reference, prediction_reference(probabilities(rng, 3000, [0.2, 0.3, 0.5]), CLASSES),
                             WatchConfig())
    assert moved["drifted"] and moved["value"] > 0.1 and moved["p_value"] < 1e-3
    assert "drifted" in describe(moved) and "cramers_v" in describe(moved)
    # 12 rows with shares far apart: the point estimate is above the threshold, the p-value is not below alpha.
    few_rows = np.eye(3)[[0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2]]  # shares 0.25/0.33/0.42 against 0.5/0.3/0.2
    few = prediction_drift(reference, prediction_reference(few_rows, CLASSES), WatchConfig())
    assert few["value"] > 0.1 and few["p_value"] > 1e-3 and not few["drifted"]


def test_the_distribution_of_predicted_values_drifts_by_the_two_sample_ks_test():
    rng = np.random.default_rng(1)
    reference = prediction_reference(rng.normal(100, 15, 20_000), [])
    assert reference["kind"] == "values" and len(reference["sample"]) == 5000 and len(reference["quantiles"]) == 101
    same = prediction_drift(reference, prediction_reference(rng.normal(100, 15, 3000), []), WatchConfig())
    assert same["comparable"] and not same["drifted"] and same["statistic"] == "ks"
    moved = prediction_drift(reference, prediction_reference(rng.normal(110, 15, 3000), []), WatchConfig())
    assert moved["drifted"] and moved["value"] > 0.1
    # A per-column override (watch.column_thresholds.prediction) moves the bound; 0 disables the test.
    looser = WatchConfig(column_thresholds={"prediction": {"ks": 0.5}})
    assert not prediction_drift(reference, prediction_reference(rng.normal(110, 15, 3000), []), looser)["drifted"]


def test_predictions_of_another_kind_are_not_compared_and_say_why():
    rng = np.random.default_rng(2)
    drift = prediction_drift(prediction_reference(rng.normal(size=50), []),
                             prediction_reference(probabilities(rng, 50, [0.5, 0.3, 0.2]), CLASSES), WatchConfig())
    assert drift == {"comparable": False, "drifted": False,
                     "reason": "the champion's predictions are values, the candidate's classes"}
    assert describe(drift).startswith("prediction drift not judged")


@pytest.mark.parametrize("rows", [0, 1])
def test_no_rows_or_one_class_is_no_drift(rows):
    rng = np.random.default_rng(3)
    reference = prediction_reference(probabilities(rng, 100, [1.0, 0.0, 0.0]), CLASSES)
    drift = prediction_drift(reference, prediction_reference(probabilities(rng, rows, [1.0, 0.0, 0.0]), CLASSES),
                             WatchConfig())
    assert drift["comparable"] and not drift["drifted"] and drift["p_value"] == 1.0


def test_predictions_that_are_neither_classes_nor_one_value_a_row_are_not_summarised():
    """``causal_lm`` predicts [nll_sum, tokens, bytes] per document: no distribution of predictions to compare."""
    assert prediction_reference(np.ones((5, 3)), []) is None


@pytest.mark.parametrize("content", ["not json {", "[1, 2]", '{"kind": "other"}'])
def test_a_kept_file_that_is_no_prediction_summary_is_not_judged_not_a_crash(tmp_path, content):
    from ctpipe.components.steps.evaluate.evaluate import _kept_predictions

    kept = tmp_path / "predictions.json"
    kept.write_text(content)
    assert _kept_predictions(str(kept)) is None and _kept_predictions(None) is None
    kept.write_text('{"kind": "values", "rows": 1, "quantiles": [1.0], "sample": [1.0]}')
    assert _kept_predictions(str(kept))["kind"] == "values"
