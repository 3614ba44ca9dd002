"""Each step records its time split: process start-up, imports, launched processes' start-up, compute."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from ctpipe.components.lib.kfp_support import STATUS_DIR_ENV, step_status
from ctpipe.components.lib.timing import import_clock, process_start_time, step_timing
from tests.fixtures.step_records import failed_step_record


def test_process_start_time_is_this_process_start():
    started = process_start_time()
    assert started is not None
    # The test process has been running at least as long as its imports took, and not for days.
    assert 0.0 < time.time() - started < 86_400


def test_import_clock_counts_a_fresh_import_and_not_plain_work(tmp_path, monkeypatch):
    module = tmp_path / "slow_module_for_import_clock.py"
    module.write_text("import time\ntime.sleep(0.2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_module_for_import_clock", raising=False)
    with import_clock() as tally:
        import slow_module_for_import_clock  # noqa: F401

        time.sleep(0.2)  # work, not an import
    assert 0.19 <= tally.seconds < 0.39


def test_import_clock_restores_the_import_function():
    import builtins

    before = builtins.__import__
    with import_clock():
        assert builtins.__import__ is not before
    assert builtins.__import__ is before


def test_split_adds_up_and_counts_start_up_as_overhead():
    split = step_timing(process_start=100.0, started=102.0, ended=112.0, import_seconds=1.5, setup_seconds=3.0)
    assert split == {
        "process_seconds": 2.0,
        "import_seconds": 1.5,
        "setup_seconds": 3.0,
        "compute_seconds": 5.5,
        "overhead_seconds": 6.5,
    }


def test_the_recorded_parts_add_up_to_the_recorded_overhead_to_the_millisecond():
    # Each part is rounded to the millisecond; the overhead must be the sum of the rounded parts, not the
    # rounded sum (which differs by up to 1.5 ms, and made CI's check ``overhead >= imports + setup`` fail).
    rng = random.Random(7)
    for _ in range(2_000):
        started = rng.uniform(0.0, 3.0)
        split = step_timing(
            process_start=rng.choice([None, 0.0]),
            started=started,
            ended=started + rng.uniform(0.0, 5.0),
            import_seconds=rng.uniform(0.0, 2.0),
            setup_seconds=rng.uniform(0.0, 2.0),
        )
        parts = (split["process_seconds"] or 0.0) + split["import_seconds"] + split["setup_seconds"]
        assert round(parts, 3) == split["overhead_seconds"], split
        assert split["overhead_seconds"] >= split["import_seconds"] + split["setup_seconds"] - 1e-9, split


def test_split_without_a_known_process_start():
    split = step_timing(process_start=None, started=0.0, ended=4.0, import_seconds=1.0, setup_seconds=0.0)
    assert split["process_seconds"] is None and split["compute_seconds"] == 3.0 and split["overhead_seconds"] == 1.0


def test_step_record_holds_import_and_compute_seconds(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    module = tmp_path / "slow_step_module_for_timing.py"
    module.write_text("import time\ntime.sleep(0.3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_step_module_for_timing", raising=False)
    with step_status("evaluate") as record:
        import slow_step_module_for_timing  # noqa: F401

        time.sleep(0.2)
        record.setup_seconds = 0.1
    saved = json.loads((tmp_path / "evaluate.json").read_text())
    timing = saved["timing"]
    assert saved["status"] == "passed" and "seconds" in saved and "result" in saved
    assert 0.29 <= timing["import_seconds"] < 0.5
    assert timing["setup_seconds"] == 0.1
    assert 0.09 <= timing["compute_seconds"] < 0.3
    assert timing["process_seconds"] > 0
    assert timing["overhead_seconds"] >= timing["process_seconds"] + timing["import_seconds"]


def test_a_failed_step_records_its_split_too(tmp_path, monkeypatch):
    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    saved = failed_step_record(tmp_path, "train", RuntimeError("rank 1 died"))
    assert saved["status"] == "failed" and set(saved["timing"]) >= {"import_seconds", "compute_seconds"}


def test_import_clock_names_the_slowest_imports(tmp_path, monkeypatch):
    (tmp_path / "slow_named_module_for_timing.py").write_text("import time\ntime.sleep(0.15)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "slow_named_module_for_timing", raising=False)
    with import_clock() as tally:
        import json as _json  # noqa: F401  (already loaded: costs nothing)

        import slow_named_module_for_timing  # noqa: F401
    assert next(iter(tally.slowest(1))) == "slow_named_module_for_timing"


EXECUTOR_STAND_IN = """
import atexit, sys
from ctpipe.components.lib.kfp_support import step_status

def report():
    print("library exit handler ran", flush=True)

# Registered before the step: it runs after the step's fast exit, so only when there is none (it
# stands for the interpreter's teardown).
atexit.register(lambda: print("teardown ran", flush=True))
mode = sys.argv[1]
with step_status("evaluate"):
    atexit.register(report)  # a library's handler, registered during the step
    if mode == "step fails":
        raise RuntimeError("the step failed")
if mode == "fails after the step":
    raise RuntimeError("writing the outputs failed")
print("outputs written", flush=True)
"""


@pytest.mark.parametrize(
    ("mode", "code"), [("passes", 0), ("step fails", 1), ("fails after the step", 1)]
)
def test_a_step_process_exits_fast_only_after_success_and_keeps_its_exit_code(tmp_path, mode, code):
    script = tmp_path / "executor_main.py"  # how KFP's executor process is named
    script.write_text(EXECUTOR_STAND_IN)
    env = {**os.environ, "_KFP_RUNTIME": "true", STATUS_DIR_ENV: str(tmp_path / "steps")}
    done = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True, env=env)
    assert done.returncode == code, done.stderr
    assert "library exit handler ran" in done.stdout  # handlers registered in the step still run
    assert ("outputs written" in done.stdout) == (code == 0)
    assert ("teardown ran" in done.stdout) == (code != 0)  # skipped after success only


def test_outside_a_kfp_executor_no_exit_handler_is_registered(monkeypatch, tmp_path):
    import atexit

    monkeypatch.setenv(STATUS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("_KFP_RUNTIME", "true")  # but this process is pytest, not executor_main.py
    registered = []
    monkeypatch.setattr(atexit, "register", lambda *a, **k: registered.append(a))
    with step_status("evaluate"):
        pass
    assert registered == []


def test_cli_start_excludes_what_a_shell_ran_before_it_exec_d_ctpipe(tmp_path):
    # `bash -c "sleep 2; python ..."` execs python as its last command: the PROCESS started before the
    # sleep, the interpreter after it. The CLI's start-up must not count the shell's earlier commands.
    script = (
        "import time, ctpipe\n"
        "from ctpipe.components.lib.timing import interpreter_start_time, process_start_time\n"
        "print(time.time() - process_start_time(), time.time() - interpreter_start_time(ctpipe.LOADED_AT))\n"
    )
    out = subprocess.run(["bash", "-c", f"sleep 2; exec {sys.executable} -c '{script}'"],
                         capture_output=True, text=True, check=True, cwd=str(tmp_path.parent)).stdout.split()
    since_process, since_interpreter = map(float, out)
    assert since_process >= 2.0  # the process existed during the shell's sleep
    assert since_interpreter < 2.0


def test_interpreter_start_is_the_process_start_for_a_plain_process():
    import ctpipe
    from ctpipe.components.lib.timing import interpreter_start_time

    assert interpreter_start_time(ctpipe.LOADED_AT, exec_slack=1e9) == pytest.approx(process_start_time(), abs=0.05)
