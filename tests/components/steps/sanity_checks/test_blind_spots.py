"""Issue 34's tabular blind spots: shuffled labels that passed as 'inconclusive', and misleading lead messages.

Shuffled labels on the demo data (7 days x 1,000 rows, the default config) must stop at the sanity step as
"no signal" (an equivalence test on the held-out gain) or as a held-out gain below zero, not warn and train; dropout left on at evaluation
must be named by a direct evaluation-determinism check, not blamed on batch mixing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctpipe.components.lib.config import Config
from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.lib.errors import SanityCheckError
from ctpipe.components.lib.models.tabular import build_model
from ctpipe.components.steps.sanity_checks.paired_gain import PairedGain
from ctpipe.components.steps.validate_data.validate import validate_data
from ctpipe.testing.bugs import DropoutAtEvaluation
from tests.components.steps.sanity_checks.test_checks import fast_config, run, snapshot, spec_of
from tests.fixtures.corpus import KEY

__all__ = ["snapshot"]  # fixture


def test_the_equivalence_verdict_is_apart_from_inconclusive():
    useful = 0.005
    # relative bounds: (mean -/+ half_width) / reference_loss
    no_signal = PairedGain(mean=-0.005, half_width=0.0055, reference_loss=1.0, rows=2048)  # [-1.05%, +0.05%]
    weak = PairedGain(mean=0.003, half_width=0.004, reference_loss=1.0, rows=2048)  # [-0.1%, +0.7%]
    assert no_signal.verdict(0.0, useful) == "no_signal"
    assert no_signal.verdict(0.0) == "inconclusive"  # without a smallest useful gain: the old rule
    assert weak.verdict(0.0, useful) == "inconclusive"
    assert PairedGain(0.01, 0.002, 1.0, 2048).verdict(0.0, useful) == "pass"
    assert PairedGain(-0.01, 0.002, 1.0, 2048).verdict(0.0, useful) == "fail"


@pytest.fixture(scope="module")
def shuffled_demo(tmp_path_factory) -> Path:
    """The demo data with its labels permuted within each day (a join that scrambles the labels)."""
    tmp = tmp_path_factory.mktemp("shuffled")
    data = tmp / "data"
    write_demo_data(data, days=7, rows_per_day=1000, seed=0)
    rng = np.random.default_rng(7)
    for part in sorted(data.glob("date=*/part-0.parquet")):
        frame = pd.read_parquet(part)
        frame["label"] = rng.permutation(frame["label"].to_numpy())
        frame.to_parquet(part, index=False)
    validate_data(str(data), Config.from_dict({"data": {"key": KEY}}), snapshot_dir=str(tmp / "snap"),
                  data_docs_path="", report_path="", tracking_uri="", mlflow_run_id="")
    return tmp / "snap"


def test_shuffled_labels_on_the_demo_data_stop_as_no_signal(shuffled_demo, tmp_path):
    with pytest.raises(SanityCheckError) as err:
        run(shuffled_demo, tmp_path, Config.from_dict({"data": {"key": KEY}}))
    message = str(err.value)
    assert message.startswith("sanity check 'beats_zero_input_baseline' failed before training, so the run stops here: "
                              "beats_zero_input_baseline: ")
    # "no signal" (the gain shown too small to matter), or, where the model fits the shuffled labels' noise within the
    # short training (the wide-and-deep default's linear path: held-out loss 0.3 % above the input-blind model's, the
    # whole interval below 0), a gain that fails outright; either way the lead names shuffled labels.
    assert ("no signal: the held-out gain over an input-blind model is at most" in message
            and "the labels carry no information about the inputs: shuffled labels" in message) or (
        "the model does no better than one that never sees the input" in message
        and "(shuffled or misaligned labels?)" in message), message
    assert (tmp_path / "sanity.md").read_text().startswith("# Sanity checks: FAILED")


def test_dropout_left_on_at_evaluation_is_named_by_the_determinism_check(snapshot, tmp_path):
    spec = spec_of(snapshot)
    cfg = fast_config()
    with pytest.raises(SanityCheckError) as err:
        run(snapshot, tmp_path, cfg, model_factory=lambda: DropoutAtEvaluation(build_model(cfg.model, spec)))
    assert str(err.value).startswith(
        "sanity check 'eval_determinism' failed before training, so the run stops here: eval_determinism: dropout "
        "active at evaluation: two evaluations of the same 64 examples in eval mode differ by")


def test_the_healthy_model_evaluates_deterministically(snapshot, tmp_path):
    result = run(snapshot, tmp_path, fast_config())
    check = next(c for c in result.checks if c.name == "eval_determinism")
    assert check.passed and check.value == 0.0, check.message


def test_a_structural_check_that_fails_only_after_warm_up_is_reported_from_then():
    from ctpipe.components.steps.sanity_checks.checks import at_init_and_warmed_up
    from ctpipe.components.tasks.protocol import CheckResult

    fresh = [CheckResult("future_tokens", True, 0.0, "<= 1e-05", "clean"), CheckResult("causal_gradient", False, 1.0,
                                                                                      "<= 1e-07", "leaks at init")]
    warmed = [CheckResult("future_tokens", False, 0.003, "<= 1e-05", "largest change 0.003"),
              CheckResult("causal_gradient", False, 2.0, "<= 1e-07", "leaks later")]
    merged = {r.name: r for r in at_init_and_warmed_up(fresh, warmed, 5, zero_layers=False)}
    assert not merged["future_tokens"].passed and merged["future_tokens"].value == 0.003
    assert merged["future_tokens"].message == ("after 5 training steps (it passes at init: a path that exists only once "
                                               "a weight is non-zero, e.g. a zero-initialised projection): largest "
                                               "change 0.003")
    assert merged["causal_gradient"].message == "leaks at init"  # the fresh model's failure comes first
