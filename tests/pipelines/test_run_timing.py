"""The run summary splits the run into the steps' compute and orchestration (everything else)."""

from __future__ import annotations

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.pipelines.local.run_summary import format_summary
from tests.fixtures.step_records import summary_of


def test_summary_adds_timing_keys_and_keeps_the_old_ones(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    for step in ("prepare_run", "validate_data"):
        with step_status(step):
            pass
    summary = summary_of(tmp_path, seconds=8.0, total_seconds=10.0)
    assert {"steps", "step_seconds", "seconds", "status", "metrics"} <= set(summary)
    assert set(summary["step_timing"]) == {"prepare_run", "validate_data"}
    for split in summary["step_timing"].values():
        assert {"import_seconds", "compute_seconds", "overhead_seconds", "process_seconds"} <= set(split)
    compute = sum(s["compute_seconds"] for s in summary["step_timing"].values())
    timing = summary["timing"]
    assert timing["total_seconds"] == 10.0
    assert abs(timing["compute_seconds"] - compute) < 0.01
    assert abs(timing["orchestration_seconds"] - (10.0 - compute)) < 0.01
    assert abs(timing["orchestration_share"] - (10.0 - compute) / 10.0) < 0.001
    assert summary["timing"]["setup"] == {}
    assert "orchestration" in format_summary(summary)


def test_the_cli_leaves_mlflow_to_the_steps():
    """`ctpipe run` itself never imports MLflow (a second or more): prepare_run creates the database."""
    import subprocess
    import sys

    code = "import sys, ctpipe.pipelines.cli.main, ctpipe.pipelines.local.local_run, ctpipe.pipelines.cli.commands.run; print('mlflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_the_summary_figures_add_up_to_the_hundredth():
    # The twin of the steps' millisecond split: orchestration is the rounded total less the rounded compute,
    # so the three figures the summary prints add up (a difference rounded on its own can be 0.01 off).
    import random

    from ctpipe.pipelines.local.run_summary import run_timing

    rng = random.Random(11)
    for _ in range(2_000):
        records = {f"step{i}": {"timing": {"compute_seconds": round(rng.uniform(0, 3), 3)}} for i in range(7)}
        timing = run_timing(records, total_seconds=rng.uniform(21.0, 40.0))
        assert round(timing["total_seconds"] - timing["compute_seconds"], 2) == timing["orchestration_seconds"]
