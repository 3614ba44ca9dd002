"""A tuned run's summary: the tune step among the steps (a run without it succeeds as before), summary.json's
`tune` section, and the printed lines (the chosen values against the configured ones, boundary warnings)."""

from __future__ import annotations

import json

from ctpipe.components.lib.config import Config
from ctpipe.pipelines.local.run_summary import build_summary, format_summary

STEPS = ("prepare_run", "validate_data", "sanity_checks", "train", "select_checkpoint", "evaluate", "register")
TUNE = {"metric": "val_accuracy", "baseline_objective": 0.81, "boundary_warnings": ["train.lr: the best value 0.09 lies in"
                                                                                   " the upper 10% (log scale) of ..."],
        "trials": [{"index": 0, "values": {"train.lr": 0.003}, "status": "succeeded", "objective": 0.81},
                   {"index": 1, "values": {"train.lr": 0.09}, "status": "succeeded", "objective": 0.86},
                   {"index": 2, "values": {"train.lr": 0.5}, "status": "diverged", "objective": None},
                   {"index": 3, "values": {"train.lr": 9.0}, "status": "gate_failed", "objective": None}],
        "chosen": {"trial": 1, "values": {"train.lr": 0.09}, "objective": 0.86}, "report": "/x/tune_report"}


def summary(tmp_path, config, tune_record=True):
    for step in STEPS + (("tune",) if tune_record else ()):
        result = TUNE if step == "tune" else {}
        (tmp_path / f"{step}.json").write_text(json.dumps({"status": "passed", "seconds": 1.0, "result": result}))
    return build_summary(tmp_path, run_dir=tmp_path, data_uri="/data", config=config, tracking_uri="sqlite:///x.db",
                         trigger="manual", seconds=9.0, runner_error=None)


def test_a_tuned_run_has_the_step_and_the_section(tmp_path):
    tuned = summary(tmp_path, Config.from_dict({"tune": {"trials": 3}}))
    assert tuned["status"] == "succeeded" and list(tuned["steps"])[3] == "tune" and tuned["tune"] == TUNE
    text = format_summary(tuned)
    assert "tuned              4 trials (2 succeeded, 1 diverged, 1 gate_failed)" in text
    assert "chosen trial 1: train.lr=0.09 (val_accuracy 0.8600; configured values 0.8100)" in text
    assert "WARNING: train.lr: the best value 0.09" in text and "report: /x/tune_report" in text


def test_an_untuned_run_is_summarised_as_before(tmp_path):
    plain = summary(tmp_path, Config(), tune_record=False)
    assert plain["status"] == "succeeded" and "tune" not in plain and "tune" not in plain["steps"]
    assert "  tuned " not in format_summary(plain) and "chosen trial" not in format_summary(plain)
