"""The decision sentence: promoted or kept, against which champion, on which metric and interval."""

from ctpipe.components.lib.decision import decision_sentence


def interval(value, low, high):
    return {"value": value, "low": low, "high": high, "confidence": 0.95}


THRESHOLDS = {"accuracy": {"value": "baseline", "change_abs": 0.0}, "log_loss": {"change_abs": 0.0}}


def test_an_equal_candidate_reads_as_promoted_no_worse_with_its_interval_and_allowance():
    blessing = {"blessed": True, "champion_version": "1", "thresholds": THRESHOLDS,
                "differences": {"accuracy": interval(0.0, 0.0, 0.0), "log_loss": interval(0.0, 0.0, 0.0)}}
    assert decision_sentence(blessing, version="2", promoted=True) == (
        "Promoted v2: no worse than champion v1 on accuracy (Δ +0.000, 95% CI [+0.000, +0.000]; allowed +0.000)")


def test_a_worse_candidate_reads_as_kept_with_the_first_reason():
    blessing = {"blessed": False, "champion_version": "3", "thresholds": THRESHOLDS,
                "reasons": ["log_loss is worse than the champion's: improvement -0.021, 95% CI [-0.035, -0.008]"],
                "differences": {"accuracy": interval(-0.01, -0.02, 0.0)}}
    sentence = decision_sentence(blessing, version="4", promoted=False)
    assert sentence.startswith("Kept v3: v4 was not blessed (log_loss is worse")


def test_a_lower_is_better_metric_reads_in_its_better_direction():
    blessing = {"blessed": True, "champion_version": "1", "thresholds": {"log_loss": {"change_abs": -0.01}},
                "differences": {"log_loss": interval(-0.02, -0.03, -0.01)}}  # the candidate's loss is lower
    assert "on log_loss (Δ +0.020, 95% CI [+0.010, +0.030]; allowed -0.010)" in decision_sentence(
        blessing, version="2", promoted=True)


def test_the_first_model_rests_on_its_gain_over_the_baseline():
    blessing = {"blessed": True, "champion_version": None, "thresholds": THRESHOLDS,
                "baseline_differences": {"accuracy": interval(0.113, 0.081, 0.14)}}
    assert decision_sentence(blessing, version="1", promoted=True) == (
        "Promoted v1: first model; beats the prior predictor on accuracy (gain +0.113, 95% CI [+0.081, +0.140])")


def test_a_blessed_candidate_that_did_not_take_the_alias_says_why():
    blessing = {"blessed": True, "champion_version": "5", "thresholds": THRESHOLDS,
                "differences": {"accuracy": interval(0.01, 0.0, 0.02)}}
    sentence = decision_sentence(blessing, version="6", promoted=False,
                                 why_not_promoted="the champion moved to v7 meanwhile (compare-and-set)")
    assert sentence.startswith("Kept v5: v6 passed evaluation (no worse than champion v5 on accuracy")
    assert sentence.endswith("but the champion moved to v7 meanwhile (compare-and-set)")


def test_a_lower_is_better_gain_over_the_baseline_reads_as_the_reasons_do():
    """Issue 47: the language model's headline said "gain -1.220, 95% CI [-1.378, -1.061]" where its reasons said
    +1.2204 [+1.0613, +1.3778]: bits_per_byte is lower-is-better by its rule, though its name says nothing."""
    thresholds = {"bits_per_byte": {"value": "baseline", "change_abs": 0.0, "direction": "lower"},
                  "loss": {"value": "baseline", "change_abs": 0.0, "direction": "lower"}}
    blessing = {"blessed": True, "champion_version": None, "thresholds": thresholds,
                "baseline_name": "the unigram model",
                "baseline_differences": {"bits_per_byte": interval(-1.2204, -1.3778, -1.0613)}}
    assert decision_sentence(blessing, version="1", promoted=True) == (
        "Promoted v1: first model; beats the unigram model on bits_per_byte (gain +1.220, 95% CI [+1.061, +1.378])")


def test_the_direction_the_blessing_judged_with_wins_over_the_name():
    """A task's own metric (direction 'auto', taken from the task) reads in the direction evaluation recorded."""
    blessing = {"blessed": True, "champion_version": "1", "thresholds": {"nll_score": {"change_abs": 0.0}},
                "higher_is_better": {"nll_score": False},
                "differences": {"nll_score": interval(-0.5, -0.7, -0.3)}}
    assert "on nll_score (Δ +0.500, 95% CI [+0.300, +0.700]" in decision_sentence(blessing, version="2", promoted=True)
