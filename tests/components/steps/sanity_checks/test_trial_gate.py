"""The sanity gate on a search's trials: each trial's config (the configured one with the trial's values) goes
through the gate's own checks; a learning rate its training checks cannot train at is refused with the gate's
message, the configured values pass, and each verdict is written where the tune step reads it."""

from __future__ import annotations

import json

import pytest

from ctpipe.components.lib.data.demo import write_demo_data
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.sanity_checks.trial_gate import gate_trials, main
from ctpipe.pipelines.local.train_alone import build_snapshot

TINY = ["data.key=customer_id", "model.hidden=16", "model.depth=2", "model.embedding_dim=4", "train.batch_size=16",
        "sanity.sample_rows=256"]
# A learning rate the config allows (< 10) at which AdamW cannot train: the gate's training checks fail.
BAD_LR = 9.0


@pytest.fixture(scope="module")
def snapshot_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("trial-gate")
    write_demo_data(root / "data", days=2, rows_per_day=150, seed=2)
    build_snapshot(str(root / "data"), load_config(None, TINY), root / "snapshot")
    return str(root / "snapshot")


def test_a_trial_whose_values_fail_the_gate_is_refused_with_the_gates_message(snapshot_dir, tmp_path):
    trials = [{"index": 0, "values": {}, "directory": str(tmp_path / "t0"), "key": "k0"},
              {"index": 1, "values": {"train.lr": BAD_LR}, "directory": str(tmp_path / "t1"), "key": "k1"}]
    healthy, refused = gate_trials(snapshot_dir, load_config(None, TINY), trials)
    assert (healthy.passed, healthy.skipped, healthy.failed_checks, healthy.message) == (True, False, [], None)
    # Which of the checks that train at the trial's rate gives way first depends on the sample; one of them does.
    assert not refused.passed and refused.failed_checks
    assert set(refused.failed_checks) <= {"overfit_one_batch", "loss_decreases", "beats_zero_input_baseline", "finite"}
    assert refused.message.startswith("sanity check '") and "failed before training" in refused.message
    for trial, verdict in zip(trials, (healthy, refused), strict=True):
        written = json.loads((tmp_path / f"t{trial['index']}" / "gate.json").read_text())
        assert written == verdict.to_dict() and written["key"] == trial["key"]
        assert (tmp_path / f"t{trial['index']}" / "sanity.md").is_file()  # the gate's report, per trial


def test_values_the_config_cannot_take_are_refused_by_name_not_raised(snapshot_dir, tmp_path):
    """A trial's values that make no model (a transformer width the heads do not divide) are that trial's refusal,
    in the config's words, not a crash of the gate on the other trials."""
    base = load_config(None, [*TINY, "model.kind=transformer", "model.heads=4"])
    (verdict,) = gate_trials(snapshot_dir, base, [{"index": 3, "values": {"model.hidden": 18},
                                                   "directory": str(tmp_path / "t")}])
    assert not verdict.passed and verdict.failed_checks == []
    assert "cannot run this trial's config: ConfigError" in verdict.message and "model.hidden" in verdict.message


def test_the_gate_turned_off_skips_every_trial(snapshot_dir, tmp_path):
    spec = tmp_path / "trials.json"
    spec.write_text(json.dumps([{"index": 0, "values": {"train.lr": BAD_LR}, "directory": str(tmp_path / "t")}]))
    config = load_config(None, [*TINY, "sanity.enabled=false"])
    assert main(["--snapshot", snapshot_dir, "--config-json", config.to_json(), "--trials", str(spec)]) == 0
    verdict = json.loads((tmp_path / "t" / "gate.json").read_text())
    assert (verdict["passed"], verdict["skipped"]) == (True, True)
