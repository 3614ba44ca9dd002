"""What `ctpipe run` shows while it runs: each step, training's progress line, no colour codes, --quiet/--verbose."""

from __future__ import annotations

import io
import json

import pytest

from ctpipe.components.engine.progress import ProgressLine
from ctpipe.components.lib.work_progress import WorkLine
from ctpipe.pipelines.local import progress as terminal_progress
from ctpipe.pipelines.local.kfp_local_patches import log_without_colour, run_step_process
from ctpipe.pipelines.local.progress import LogTail, StepProgress


class Terminal(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def line(step: int, total: int = 100) -> str:
    return "[train] " + ProgressLine(step, total, 0.5, 123.4, 10.0 * (total - step)).text()


def write_status(status_dir, step: str, status: str) -> None:
    status_dir.mkdir(exist_ok=True)
    (status_dir / f"{step}.json").write_text(json.dumps({"step": step, "status": status, "seconds": 1.0}))


def test_a_progress_line_reads_back_as_it_was_written():
    written = ProgressLine(120, 600, 0.41321, 1234.5, 3725.0)
    parsed = ProgressLine.parse("2026-11-27 [train] " + written.text())
    assert parsed == ProgressLine(120, 600, 0.4132, 1234.5, 3725.0)
    assert "step 120/600 loss 0.4132 1234.5 samples/s ETA 1:02:05" in written.text()
    assert ProgressLine.parse("[train] step 120: val_loss=0.3") is None


def test_log_tail_yields_only_complete_new_lines(tmp_path):
    log = tmp_path / "pipeline.log"
    log.write_text("before the run\n")
    tail = LogTail(log)
    with open(log, "a") as f:
        f.write("one\ntw")
    assert tail.new_lines() == ["one"]
    with open(log, "a") as f:
        f.write("o\n")
    assert tail.new_lines() == ["two"]


def _step_running(tmp_path, monkeypatch, step: str, tty: bool):
    """A run whose ``step`` is running, its empty pipeline.log, and the progress view on a (non-)TTY terminal;
    only quarter-marks print on a non-TTY (the timed line is an hour away)."""
    monkeypatch.setattr(terminal_progress, "PRINT_EVERY_SECONDS", 3600.0)
    log, status = tmp_path / "pipeline.log", tmp_path / "status"
    log.write_text("")
    write_status(status, step, "running")
    out = Terminal(tty)
    return log, status, out, StepProgress(status, out, log_path=log)


@pytest.mark.parametrize("tty", [False, True])
def test_training_progress_reaches_the_terminal_from_the_log(tmp_path, monkeypatch, tty):
    log, status, out, shown = _step_running(tmp_path, monkeypatch, "train", tty)
    for step in range(10, 101, 10):
        with open(log, "a") as f:
            f.write("\x1b[96m" + line(step) + "\x1b[0m\n")
        shown.poll()
    write_status(status, "train", "passed")
    shown.poll()
    text = out.getvalue()
    printed = [p.step for p in map(ProgressLine.parse, text.replace("\r", "\n").splitlines()) if p]
    if tty:  # every window, rewritten in place on one line
        assert printed == list(range(10, 101, 10))
        assert text.count("\r") == 10
    else:  # a quarter of the steps apart (the period is an hour here), and the last
        assert printed == [10, 40, 70, 100], printed
        assert "\r" not in text
    assert "\x1b[9" not in text  # the log's colour codes do not reach the terminal
    assert text.rstrip().endswith("passed in 1.0s")


def test_quiet_prints_nothing_and_verbose_echoes_the_log(tmp_path):
    log, status = tmp_path / "pipeline.log", tmp_path / "status"
    log.write_text("")
    write_status(status, "validate_data", "running")
    quiet, verbose = Terminal(False), Terminal(False)
    shown = [StepProgress(status, quiet, -1, log_path=log), StepProgress(status, verbose, 1, log_path=log)]
    with open(log, "a") as f:
        f.write("a step's own output\n" + line(50) + "\n")
    for s in shown:
        s.poll()
    assert quiet.getvalue() == ""
    assert "  | a step's own output" in verbose.getvalue()
    assert "validate data" in verbose.getvalue()


def test_kfp_local_output_carries_no_colour_codes(capsys):
    from kfp.local import logging_utils

    with log_without_colour():
        assert logging_utils.color_text("task", logging_utils.Color.CYAN) == "task"
    assert logging_utils.Color.CYAN != ""  # put back afterwards
    assert run_step_process(["bash", "-c", r"printf '\033[92mSUCCESS\033[0m\n'"]) == 0
    assert "\x1b[" not in capsys.readouterr().out


@pytest.mark.parametrize("tty", [False, True])
def test_a_long_validation_shows_its_progress_line_like_training(tmp_path, monkeypatch, tty):
    log, status, out, shown = _step_running(tmp_path, monkeypatch, "validate_data", tty)
    for done in range(100, 1001, 100):
        with open(log, "a") as f:
            f.write(WorkLine("validate_data", "scanning", done, 1000, "rows", 50.0, (1000 - done) / 50,
                             done // 250, 4).text() + "\n")
        shown.poll()
    write_status(status, "validate_data", "passed")
    shown.poll()
    text = out.getvalue()
    printed = [w.done for w in map(WorkLine.parse, text.replace("\r", "\n").splitlines()) if w]
    if tty:  # each line rewritten in place
        assert printed == list(range(100, 1001, 100)) and text.count("\r") == 10
    else:  # a quarter of the rows apart (the period is an hour here), and the last
        assert printed == [100, 400, 700, 1000], printed
        assert "\r" not in text
    assert text.rstrip().endswith("validate data (fingerprint, splits, Great Expectations): passed in 1.0s")


def test_kfp_local_does_not_warn_of_a_docker_runner_for_every_step(recwarn):
    """KFP's SubprocessRunner warns that an image without 'python' in its name may need the DockerRunner; ctpipe's
    steps run from the installed package, as in the component image, so pipeline.log had that warning for
    nothing (issue 47). Any other warning still shows."""
    import warnings

    from kfp.local.subprocess_task_handler import SubprocessTaskHandler

    from ctpipe.components.lib.kfp_support import COMPONENT_IMAGE
    from ctpipe.pipelines.local.kfp_local_patches import no_docker_runner_warning

    warnings.simplefilter("always")
    SubprocessTaskHandler.validate_image(None, COMPONENT_IMAGE)  # type: ignore[arg-type]
    assert any("DockerRunner" in str(w.message) for w in recwarn)  # what the patch is for
    recwarn.clear()
    with no_docker_runner_warning():
        SubprocessTaskHandler.validate_image(None, COMPONENT_IMAGE)  # type: ignore[arg-type]
        warnings.warn("another warning", RuntimeWarning, stacklevel=1)
    assert [str(w.message) for w in recwarn] == ["another warning"]
