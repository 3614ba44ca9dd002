"""The blessing's reasons name each task's own input-blind baseline, not a classifier's prior predictor."""

from __future__ import annotations

import numpy as np
import pytest

from ctpipe.components.run_config import load_config
from ctpipe.components.steps.evaluate.judgement import judge_candidate
from ctpipe.components.tasks import load_task


@pytest.mark.parametrize(("name", "words"), [("tabular_regression", "the mean predictor's"),
                                             ("causal_lm", "the unigram model's")])
def test_the_baseline_is_named_by_the_task(name, words):
    task = load_task({"name": name, "entrypoint": None, "options": {}})
    assert task.scoring.baseline_name in words


def test_a_regression_reason_names_the_mean_predictor():
    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    rng = np.random.default_rng(0)
    y = rng.normal(10.0, 2.0, 300)
    # The task's own rules (its config_defaults): RMSE and MAE against the baseline.
    config = load_config(None, ["task.name=tabular_regression", "evaluate.bootstrap_samples=200"])
    judgement = judge_candidate(y, y + rng.normal(0, 0.5, 300), None, config, None, [], scorer=task.scoring,
                                baseline=np.full(300, 10.0))
    reasons = [c.message for c in judgement.checks]
    assert reasons and all("vs the mean predictor's" in r and "prior predictor" not in r for r in reasons)
    assert judgement.passed


def test_the_judgement_records_each_rule_s_direction_for_the_headline():
    """The decision sentence reads its interval in the direction the rules judged (issue 47: a lower-is-better
    gain printed with the wrong sign): evaluation records it per metric, and the headline agrees with the reason."""
    from ctpipe.components.lib.decision import decision_sentence

    task = load_task({"name": "tabular_regression", "entrypoint": None, "options": {}})
    rng = np.random.default_rng(0)
    y = rng.normal(10.0, 2.0, 300)
    config = load_config(None, ["task.name=tabular_regression", "evaluate.bootstrap_samples=200"])
    judgement = judge_candidate(y, y + rng.normal(0, 0.5, 300), None, config, None, [], scorer=task.scoring,
                                baseline=np.full(300, 10.0))
    assert judgement.higher_is_better and set(judgement.higher_is_better.values()) == {False}
    metric = next(iter(config.evaluate.thresholds))
    blessing = {"blessed": True, "champion_version": None, "thresholds": {metric: {"value": "baseline"}},
                "higher_is_better": judgement.higher_is_better,
                "baseline_differences": {metric: judgement.evidence[metric].vs_baseline.to_dict()}}
    assert "(gain +" in decision_sentence(blessing, version="1", promoted=True)
