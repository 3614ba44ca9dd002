"""The sanity report's model line: the model as the task describes it (``Task.describe_model``)."""

from __future__ import annotations

from dataclasses import asdict

from ctpipe.components.lib.config import Config
from ctpipe.components.steps.sanity_checks.report import SanityResult, render_report
from ctpipe.components.tasks import CheckResult, load_task


def test_the_tabular_report_names_the_configured_model_section():
    config = Config()
    model = load_task(config.task).describe_model(config, {})
    assert model == asdict(config.model)
    result = SanityResult(checks=[CheckResult("finite", True, 0.0, "0", "none")], seconds=1.0, sample="64 rows")
    report = render_report(result, None, model, "tabular_classification")
    assert "Model `mlp` (hidden 128, depth 3, dropout 0.1" in report and "64 rows; 1.00 s in all." in report


def test_a_model_without_a_kind_is_named_by_its_task():
    report = render_report(SanityResult(sample="8 rows"), None, {"d_model": 64}, "causal_lm")
    assert "Model `causal_lm` (d_model 64); 8 rows" in report
