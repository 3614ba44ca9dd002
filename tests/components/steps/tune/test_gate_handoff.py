"""Tuning never bypasses the gate: the train step takes tuned values (``tune.chosen``) only when the chosen trial's
values passed the sanity gate, and refuses, before it launches anything, a config whose chosen trial did not."""

from __future__ import annotations

import pytest

from ctpipe.components.lib.errors import ConfigError
from ctpipe.components.run_config import load_config
from ctpipe.components.steps.train.launch import train_model
from ctpipe.components.steps.tune.trials import TrialOutcome
from ctpipe.components.steps.tune.tune import choose


class NoLaunch:
    """A launcher that must not be reached: the refusal comes before any job."""

    def __init__(self) -> None:
        self.launched = []

    def run(self, launch):
        self.launched.append(launch)
        raise AssertionError("the train step launched a job for values the sanity gate did not pass")


def tuned(gate: str | None, *settings: str):
    config = load_config(None, list(settings))
    chosen = {"trial": 2, "values": {"train.lr": 9.0}, "objective": 0.9}
    config.tune.chosen = {"chosen": {**chosen, **({"gate": gate} if gate else {})}, "search": []}
    return config


@pytest.mark.parametrize("gate", ["failed", None, "skipped"])
def test_the_train_step_refuses_tuned_values_the_gate_did_not_pass(gate, tmp_path):
    launcher = NoLaunch()
    with pytest.raises(ConfigError, match=r"tune.chosen: the chosen trial 2 .*sanity gate's verdict"):
        train_model(str(tmp_path / "snapshot"), str(tmp_path / "checkpoints"), tuned(gate), tracking_uri=None,
                    mlflow_run_id=None, job_name="t", launcher=launcher)
    assert launcher.launched == [] and not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(("gate", "settings"), [("passed", ()), ("skipped", ("sanity.enabled=false",))])
def test_the_train_step_launches_tuned_values_the_gate_passed(gate, settings, tmp_path):
    launcher = NoLaunch()
    with pytest.raises(AssertionError, match="launched a job"):
        train_model(str(tmp_path / "snapshot"), str(tmp_path / "checkpoints"), tuned(gate, *settings),
                    tracking_uri=None, mlflow_run_id=None, job_name="t", launcher=launcher)
    assert len(launcher.launched) == 1


def test_only_a_trial_whose_values_passed_the_gate_is_chosen():
    def outcome(index, objective, gate):
        return TrialOutcome(index=index, values={"train.lr": index}, status="succeeded", job_name=f"t{index}",
                            objective=objective, gate=gate)

    best_but_refused = outcome(1, 0.99, "failed")  # a Katib trial the gate refused once its values were known
    ungated = outcome(2, 0.98, None)
    assert choose([outcome(0, 0.5, "passed"), best_but_refused, ungated, outcome(3, 0.6, "skipped")], "max").index == 3
    assert choose([best_but_refused, ungated], "max") is None
