"""benchmarks/gate_calibration: the mechanics of the LM blessing's equal-pair measurement and of the text drift
calibration, on a handful of draws (the 200-draw figures are the benchmark's, ``python benchmarks/gates.py``)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.fixtures.paths import REPO_ROOT

CALIBRATION = REPO_ROOT / "benchmarks" / "gate_calibration"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(f"gate_calibration_{name}", CALIBRATION / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_equal_language_model_pairs_are_blessed_and_a_worse_one_is_blocked():
    figures = _module("lm_blessing").measure(0, pairs=4, train_steps=40, model_pairs=1)
    assert (figures["lm_equal_pairs"], figures["lm_model_pairs"]) == (4, 1)
    assert figures["lm_false_blocks"] == 0 and figures["lm_false_block_rate"] == 0.0
    assert figures["lm_nominal_block_rate"] == pytest.approx(0.025)
    assert figures["lm_worse_candidate_blocked"]  # 4 steps against 40: the test can block
    assert figures["lm_false_block_rate_95"][0] == 0.0 and 0.4 < figures["lm_false_block_rate_95"][1] < 0.6  # Wilson
    assert figures["lm_level_by_construction"] == pytest.approx(500 / 20001, abs=1e-6)  # k / (flips + 1)


def test_the_coin_level_judges_every_coin_of_every_split_with_the_blessings_interval():
    figures = _module("lm_blessing").coin_level(0, splits=2, coins=40, flips=200, model_pairs=1, train_steps=40)
    assert figures["lm_coin_judgements"] == 80 and len(figures["lm_blocks_per_split"]) == 2
    assert figures["lm_level_by_construction"] == pytest.approx(5 / 201, abs=1e-6)
    assert figures["lm_coin_blocks"] == sum(figures["lm_blocks_per_split"]) <= 6  # 2.5 % of 80: 2 expected


def test_every_text_shift_is_flagged_and_the_same_source_resample_is_not():
    figures = _module("text_drift").measure(0, resamples=1)
    assert (figures["text_drift_resamples"], figures["text_drift_false_alarms"]) == (1, 0)
    # The union bound over the report's tests at watch.max_p_value (0.001): 7 text columns x 4 tests (null
    # fraction included) + the byte histogram's 2 + the shares' joint profile.
    assert figures["text_drift_nominal_false_alarm_rate"] == pytest.approx(0.031)
    assert set(figures["text_drift_detected"]) == {
        "lowercase",
        "encoding_cp1252",
        "injected_base64_5pct",
        "mixture_other_source_30pct",
    }
    assert all(rate == 1.0 for rate in figures["text_drift_detected"].values()), figures[
        "text_drift_detected_by"
    ]
    # Lower-casing leaves every byte class but case as it was: the case share sees it (and the joint profile).
    assert figures["text_drift_detected_by"]["lowercase"][0] == "text__upper_share"
